package host

import (
	"errors"
	"fmt"
	"strings"
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
