package host

import (
	"errors"
	"fmt"
	"strings"

	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/nvmeof/nvme"
)

// ErrCommandTimeout is the error of a controller that reset itself because
// a command went unanswered for Config.IOTimeout: a target that answers
// Keep Alive but never completes a command. Unlike a call's own context
// ending, it does not match context.DeadlineExceeded.
var ErrCommandTimeout = errors.New("nvmeof: command timeout")

// ErrKeepAliveExpired is the error of a controller whose Keep Alive went
// unanswered for KATO: the target, or the path to it, stopped.
var ErrKeepAliveExpired = errors.New("nvmeof: keep-alive expired")

// endedError is why a controller's queues ended: its cause
// (ErrCommandTimeout, ErrKeepAliveExpired) and ErrQueueDead both match it.
type endedError struct {
	cause error
	msg   string
}

func (e *endedError) Error() string   { return e.cause.Error() + ": " + e.msg }
func (e *endedError) Unwrap() []error { return []error{e.cause, ErrQueueDead} }

// inQueue says which queue err is about, with the package's prefix once
// (the errors of package nvme carry it too).
func inQueue(qid uint16, err error) error { return &queueError{qid: qid, err: err} }

type queueError struct {
	qid uint16
	err error
}

func (e *queueError) Error() string {
	return fmt.Sprintf("nvmeof: queue %d: %s", e.qid, strings.TrimPrefix(e.err.Error(), "nvmeof: "))
}
func (e *queueError) Unwrap() error { return e.err }

// cmRejectNames name the NVMe/RDMA CM reject statuses.
var cmRejectNames = map[uint16]string{
	nvme.CMRejectInvalidRecFmt: "Invalid Record Format", nvme.CMRejectInvalidQID: "Invalid QID",
	nvme.CMRejectInvalidHSQSize: "Invalid HSQSIZE", nvme.CMRejectInvalidHRQSize: "Invalid HRQSIZE",
	nvme.CMRejectNoResources: "No Resources", nvme.CMRejectInvalidIRD: "Invalid IRD",
	nvme.CMRejectInvalidORD: "Invalid ORD", nvme.CMRejectInvalidCntlID: "Invalid Controller ID",
}

// rejectReason says why the target rejected a queue's connection, if err
// is an MPA Reject whose private data is an NVMe/RDMA CM reject.
func rejectReason(err error) string {
	var re *mpa.RejectError
	if !errors.As(err, &re) {
		return ""
	}
	rj, perr := nvme.ParseCMReject(re.PrivateData)
	if perr != nil {
		return ""
	}
	name := cmRejectNames[rj.Status]
	if name == "" {
		name = "unknown"
	}
	return fmt.Sprintf(": NVMe/RDMA CM status %s (%#x)", name, rj.Status)
}
