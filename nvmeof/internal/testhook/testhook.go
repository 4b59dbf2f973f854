// Package testhook holds the target's fault-injection points that tests of
// other packages set: the host's tests, which run against a real target,
// make it fail commands the way a troubled target or path would. Each hook
// is nil outside tests.
package testhook

import (
	"sync/atomic"

	"github.com/goiwarp/iwarp/nvmeof/nvme"
)

// IOStatus, if set, answers each I/O command for which it returns a status
// other than Success with that status, unexecuted: a target's transient
// errors, or those of one port (port is the port's ID).
var IOStatus atomic.Pointer[func(port uint16, cmd nvme.Command) nvme.Status]
