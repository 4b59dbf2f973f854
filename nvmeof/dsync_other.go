//go:build !linux

package nvmeof

import "os"

// oDSync opens a file whose writes return once they are durable (O_SYNC:
// not every system has O_DSYNC).
const oDSync = os.O_SYNC
