package verbs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"
)

// ErrReplyTimeout: Dial's TCP connection was up but no complete MPA Reply
// came within ConnConfig.ReplyTimeout: a peer that is not an iWARP
// responder, or one too busy to answer.
var ErrReplyTimeout = errors.New("verbs: no MPA Reply within ConnConfig.ReplyTimeout")

// replyTimeoutError is ErrReplyTimeout for one Dial; it Is
// os.ErrDeadlineExceeded too, as a net.Conn's timeouts are.
type replyTimeoutError struct {
	addr    string
	timeout time.Duration
}

func (e *replyTimeoutError) Error() string {
	return fmt.Sprintf("verbs: MPA start-up with %s: no MPA Reply within ConnConfig.ReplyTimeout (%v), though TCP was connected", e.addr, e.timeout)
}

func (e *replyTimeoutError) Unwrap() []error { return []error{ErrReplyTimeout, os.ErrDeadlineExceeded} }

// Timeout makes it a net.Error timeout.
func (e *replyTimeoutError) Timeout() bool { return true }

// Temporary is net.Error's deprecated method, for completeness.
func (e *replyTimeoutError) Temporary() bool { return false }

// dialStartupErr is the error of a Dial whose MPA Request or Reply failed:
// ReplyTimeout's own deadline is said as such, not as the TCP connection
// lost that mpa.ReadFrame reports for any read error.
func dialStartupErr(ctx context.Context, addr string, timeout time.Duration, err error) error {
	if cerr := ctxErr(ctx, err); cerr != err {
		return fmt.Errorf("verbs: MPA start-up with %s: %w", addr, cerr)
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return &replyTimeoutError{addr: addr, timeout: timeout}
	}
	return fmt.Errorf("verbs: MPA start-up with %s: %w", addr, err)
}
