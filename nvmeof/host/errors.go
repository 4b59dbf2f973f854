package host

import "errors"

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
