package verbs

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goiwarp/iwarp/mpa"
	"golang.org/x/sys/cpu"
)

// QPState is the state of a queue pair: siw's IDLE, RTS, CLOSING,
// TERMINATE and ERROR (RFC 5040 section 6 leaves them to the
// implementation). There is no RTR state: a QP goes from IDLE to RTS when
// its connection is established, by Dial or Accept.
type QPState int32

// QP states.
const (
	StateIdle      QPState = iota // created, not connected
	StateRTS                      // connected: work requests are carried out
	StateClosing                  // graceful disconnect under way
	StateTerminate                // a Terminate is being sent
	StateError                    // connection gone; work requests flush
)

var stateNames = [...]string{"IDLE", "RTS", "CLOSING", "TERMINATE", "ERROR"}

func (s QPState) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("QPState(%d)", int32(s))
}

// QPCap sizes a QP's queues; zero fields take the defaults: 128 send and
// receive WRs (no receive queue with an SRQ), one SGE each way, and 64
// octets of inline data. A negative MaxRecvWR or MaxInline means none.
type QPCap struct {
	MaxSendWR, MaxRecvWR   int
	MaxSendSGE, MaxRecvSGE int
	MaxInline              int
}

// defaultQPWR is the queue depth a zero QPCap gets, as perftest's, and
// defaultInline its inline data: enough for a short message or a note of
// where a buffer is.
const (
	defaultQPWR   = 128
	defaultInline = 64
)

// QPConfig describes a QP to create.
type QPConfig struct {
	SendCQ, RecvCQ *CQ
	SRQ            *SRQ // receives come from here instead of the QP's own RQ
	Cap            QPCap
	// SigAll completes every send WR; otherwise only those with Signaled.
	SigAll bool
	// IRD and ORD: inbound RDMA Reads served at once and outbound Reads
	// outstanding. Negotiated at connection time (MPA rev 2) and never
	// above these. 0 means the device maximum (DeviceAttr.MaxIRD, MaxORD;
	// more is refused); a negative value means none (MPA IRD/ORD 0, as
	// perftest advertises for tests without Reads). Reads and atomics
	// posted beyond the negotiated ORD (Params().ORD) are not refused:
	// they wait in the send queue, and the WRs behind them too, until
	// earlier ones complete (RFC 5040 section 6.5); Stats().ReadsOutstanding
	// counts those on the wire.
	IRD, ORD int
}

// QP is a reliable-connected queue pair. Its methods may be called from
// several goroutines at once: posts from many, Close, Abort and Disconnect
// while they run (package doc, "Concurrency"); only Dial and Accept are one
// at a time.
type QP struct {
	pd     *PD
	dev    *Device
	cfg    QPConfig
	sendCQ *CQ
	recvCQ *CQ
	srq    *SRQ

	state     atomic.Int32
	startMu   sync.Mutex // serialises connecting; guards conn, closed and claimed
	closed    bool       // Close was called
	claimed   bool       // a Dial or Accept is under way (claim)
	closeOnce sync.Once

	// Send queue ring, guarded by sqMu. Entries [sqHead, tx.next) are being
	// carried out or awaiting completion; [tx.next, sqTail) wait for the
	// transmit loop. Slots are reused only after retirement, so the loops may
	// use an entry's fields without the lock once they own it. sqNext is
	// written only by the transmit side with txMu held (txPublish,
	// flushAll), and is atomic so that it may advance without sqMu; it
	// may lag behind the entries the transmit side has taken (tx.next),
	// never behind those it completed.
	//
	// A poster and the transmit loop often run on two cores, so the fields
	// are grouped by who writes them, each group on cache lines of its own:
	// a line one side writes and the other reads moves between the cores
	// on every access (write_bw -s 64 -t 128: the poster's stagCache
	// lookup, next to sqNext, missed on every post). The slices are
	// written once; sqMu, taken by both, is alone.
	sq       []sqe
	sqSegs   [][]byte // gather lists: MaxSendSGE per slot
	sqInline []byte   // inline data: MaxInline per slot, allocated on first use
	sqExt    []sqeExt // allocated on first use (sqExtOf)
	_        cpu.CacheLinePad
	sqMu     sync.Mutex
	_        cpu.CacheLinePad
	// The posters' side.
	sqTail     uint64
	sqHeadSeen uint64    // sqHead when a poster last looked: the ring is full only if it still is
	sqFlushed  bool      // ERROR reached: new WRs flush at once
	sqStags    stagCache // the posters' last local region, under sqMu
	_          cpu.CacheLinePad
	// sqPub is sqTail as the transmit loop reads it without sqMu, stored
	// by posters (enqueue: every sqPubEvery WRs and when a post ends), so
	// that the loop takes WRs while a poster is still filling a batch
	// instead of waiting on sqMu for it (and then behind the poster).
	// Under sqMu it equals sqTail.
	sqPub atomic.Uint64
	_     cpu.CacheLinePad
	// The transmit side's (and, for Reads and atomics, the receive side's).
	sqHead uint64
	sqNext atomic.Uint64
	// sqWritten: SQ entries below it were handed to TCP in full by a
	// successful write; flushAll completes those that a write completes
	// (txCompleted runs only when the transmit loop runs dry).
	sqWritten atomic.Uint64
	// sqDoneTo, under sqMu: the WRs below it that complete once written
	// (doneWhenWritten) are done, without a store into their entries,
	// which a poster on another core would take back on its next lap.
	sqDoneTo uint64
	// sqCleared, under sqMu: the gather lists below it hold no references
	// to user memory (retireLocked clears them when the SQ empties).
	sqCleared uint64
	sqIdle    chan struct{} // closed when the SQ drains (Disconnect)
	_         cpu.CacheLinePad

	rq recvQueue // the QP's own receive queue (unused with an SRQ)

	wake chan struct{} // capacity 1: new work for the transmit loop

	// Connection state, set by Dial or Accept before the loops start.
	conn   net.Conn
	peerPD []byte // the peer's private data
	params mpa.Params
	mulpdu int
	ext    bool // RFC 7306 atomics and Immediate Data enabled on this connection
	ird    int  // negotiated: Read Requests we serve at once
	ord    int  // negotiated: Read Requests we have outstanding

	// Read by every post (enqueue), written seldom: a line of their own,
	// away from txMu and tx, which the transmit loop writes all the time.
	rxSeen   atomic.Uint64 // FPDUs received, as last published; with txRxSeen, tells request/response traffic
	txRxSeen atomic.Uint64 // rxSeen when the transmit side last ran
	_        cpu.CacheLinePad

	txMu       sync.Mutex                    // held by whoever runs the transmit side: the loop, or PostSend
	tx         txState                       // guarded by txMu
	txStats    txStats                       // tx's counters, for Stats
	txParked   atomic.Bool                   // the transmit loop waits for work, its arena given back
	txWG       sync.WaitGroup                // the transmit loop runs (Close waits for its last write)
	finReq     atomic.Pointer[chan struct{}] // Disconnect asks for the FIN, closed once sent (txFIN)
	rx         rxState                       // owned by the receive loop
	rxFn       atomic.Pointer[func()]        // SetRxHandler's handler
	rxHandling atomic.Uint32                 // the receive goroutine is in rxFn (rxInHandler, rxInBurst): its posts must not wait (txInline)
	// Posts held while a handler ran in a burst (txInline), and their wire
	// octets: the receive loop sends them when the burst is taken
	// (rxSendHeld).
	txHeld     atomic.Bool
	txHeldWire atomic.Int64

	// Queues between the loops.
	irdq readQueue // peer's Read Requests: rx pushes, tx serves
	ordq readQueue // our outstanding Reads: tx pushes, rx completes

	rtrDone   chan struct{} // closed when the peer-to-peer RTR has arrived (or none is due)
	peerFIN   atomic.Bool   // the peer closed its stream: send what is owed, start no new WR
	holdSQ    atomic.Bool   // this side must not send first yet (holdFirst)
	nudge     atomic.Bool   // tx: send a zero-length Write (nudgeRTR)
	holdMu    sync.Mutex    // guards holdTimer
	holdTimer *time.Timer   // the hold's fallback, if any
	resp      respWatch     // ConnConfig.ResponseTimeout

	errOnce   sync.Once
	err       error         // first fatal cause, set in errOnce
	errSet    atomic.Bool   // err is set: Err reads it from then on
	termMu    sync.Mutex    // guards term
	term      []byte        // Terminate ULPDU for tx to send
	termSet   atomic.Bool   // term was set
	done      chan struct{} // closed when the QP is in ERROR and flushed
	stop      chan struct{} // closed to stop the loops
	stopOnce  sync.Once
	loopsLeft atomic.Int32
	wg        sync.WaitGroup
}

// CreateQP creates an RC queue pair in the IDLE state.
func (pd *PD) CreateQP(cfg QPConfig) (*QP, error) {
	d := pd.dev
	a := d.attr
	c := &cfg.Cap
	if cfg.SendCQ == nil || cfg.RecvCQ == nil {
		return nil, fmt.Errorf("%w: QP needs a send and a receive CQ", ErrInvalidArg)
	}
	if cfg.SendCQ.dev != d || cfg.RecvCQ.dev != d || cfg.SRQ != nil && cfg.SRQ.pd.dev != d {
		return nil, fmt.Errorf("%w: a CQ or SRQ of another device", ErrInvalidArg) // as ibverbs' EINVAL
	}
	if c.MaxSendWR == 0 {
		c.MaxSendWR = min(defaultQPWR, a.MaxQPWR)
	}
	switch {
	case c.MaxInline == 0:
		c.MaxInline = min(defaultInline, a.MaxInline)
	case c.MaxInline < 0:
		c.MaxInline = 0
	}
	switch {
	case c.MaxRecvWR == 0 && cfg.SRQ == nil:
		c.MaxRecvWR = min(defaultQPWR, a.MaxQPWR)
	case c.MaxRecvWR < 0:
		c.MaxRecvWR = 0 // none: a QP that only answers Reads, say; a Send to it is refused
	}
	if c.MaxSendWR < 0 || c.MaxSendWR > a.MaxQPWR || c.MaxRecvWR < 0 || c.MaxRecvWR > a.MaxQPWR ||
		c.MaxSendSGE < 0 || c.MaxSendSGE > a.MaxSGE || c.MaxRecvSGE < 0 || c.MaxRecvSGE > a.MaxSGE ||
		c.MaxInline < 0 || c.MaxInline > a.MaxInline {
		return nil, fmt.Errorf("%w: QP capabilities %+v exceed device limits (%d WRs, %d SGEs, %d octets inline)",
			ErrInvalidArg, *c, a.MaxQPWR, a.MaxSGE, a.MaxInline)
	}
	if c.MaxSendSGE == 0 {
		c.MaxSendSGE = 1
	}
	if c.MaxRecvSGE == 0 {
		c.MaxRecvSGE = 1
	}
	if cfg.IRD > a.MaxIRD || cfg.ORD > a.MaxORD {
		return nil, fmt.Errorf("%w: IRD %d / ORD %d above the device's %d / %d (DeviceAttr.MaxIRD, MaxORD)",
			ErrInvalidArg, cfg.IRD, cfg.ORD, a.MaxIRD, a.MaxORD)
	}
	if cfg.IRD == 0 {
		cfg.IRD = a.MaxIRD
	}
	if cfg.ORD == 0 {
		cfg.ORD = a.MaxORD
	}
	cfg.IRD, cfg.ORD = max(cfg.IRD, 0), max(cfg.ORD, 0)
	qp := &QP{
		pd: pd, dev: d, cfg: cfg, sendCQ: cfg.SendCQ, recvCQ: cfg.RecvCQ, srq: cfg.SRQ,
		sq:     make([]sqe, c.MaxSendWR),
		sqSegs: make([][]byte, c.MaxSendWR*c.MaxSendSGE),
		wake:   make(chan struct{}, 1),
		done:   make(chan struct{}),
		stop:   make(chan struct{}),
	}
	if cfg.SRQ == nil {
		qp.rq.init(c.MaxRecvWR, c.MaxRecvSGE)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.closed:
		return nil, fmt.Errorf("%w: device", ErrClosed)
	case d.nqp >= a.MaxQP:
		return nil, fmt.Errorf("%w: %d QPs", ErrResources, a.MaxQP)
	}
	if err := qp.use(); err != nil {
		return nil, err
	}
	d.nqp++
	d.qps[qp] = struct{}{}
	return qp, nil
}

// State returns the QP's state.
func (qp *QP) State() QPState { return QPState(qp.state.Load()) }

// Config returns the QP's configuration as created, its defaults filled
// in: the work requests and SGEs its queues take, the inline limit, and
// the IRD and ORD it offers at connection time (what was negotiated is in
// Params), as ibv_create_qp writes the capabilities granted back into its
// caller's attributes.
func (qp *QP) Config() QPConfig { return qp.cfg }

// PD returns the QP's protection domain.
func (qp *QP) PD() *PD { return qp.pd }

// Params returns what MPA start-up negotiated (zero until Dial or Accept
// has connected the QP).
func (qp *QP) Params() mpa.Params {
	qp.startMu.Lock()
	defer qp.startMu.Unlock()
	return qp.params
}

// MULPDU returns the largest ULPDU the QP puts in one FPDU (zero until
// Dial or Accept has connected the QP).
func (qp *QP) MULPDU() int {
	qp.startMu.Lock()
	defer qp.startMu.Unlock()
	return qp.mulpdu
}

// connOf returns the QP's TCP connection (nil before it connects).
func (qp *QP) connOf() net.Conn {
	qp.startMu.Lock()
	defer qp.startMu.Unlock()
	return qp.conn
}

// LocalAddr and RemoteAddr return the connection's addresses (nil before it
// connects).
func (qp *QP) LocalAddr() net.Addr {
	if c := qp.connOf(); c != nil {
		return c.LocalAddr()
	}
	return nil
}

// RemoteAddr returns the peer's address (nil before the QP connects).
func (qp *QP) RemoteAddr() net.Addr {
	if c := qp.connOf(); c != nil {
		return c.RemoteAddr()
	}
	return nil
}

// PeerPrivateData returns the private data of the peer's MPA Request
// (Accept) or Reply (Dial), without the Rev 2 IRD/ORD word; nil until Dial
// or Accept has connected the QP.
func (qp *QP) PeerPrivateData() []byte {
	qp.startMu.Lock()
	defer qp.startMu.Unlock()
	if qp.conn == nil {
		// Dial and Accept store peerPD before start publishes conn under
		// startMu; until then it is theirs.
		return nil
	}
	return qp.peerPD
}

// Done is closed when the QP has reached ERROR and flushed its work
// requests. A QP on an SRQ takes no receive from it after that (what
// ibverbs tells with IBV_EVENT_QP_LAST_WQE_REACHED).
func (qp *QP) Done() <-chan struct{} { return qp.done }

// Err returns why the QP left RTS: a *TerminateError (a Terminate we sent
// or received), ErrConnLost (with ErrResponseTimeout or ErrUnanswered when
// Reads of ours went unanswered), ErrDisconnected, or nil while it is
// healthy; for a QP closed before it ever connected, an error that Is
// ErrClosed.
// The cause is there from the moment the QP leaves RTS, before any work
// completion with an error status is delivered, so an application that
// polls a failed WC can always ask why.
func (qp *QP) Err() error {
	if !qp.errSet.Load() {
		return nil
	}
	return qp.err
}
