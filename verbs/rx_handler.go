package verbs

// SetRxHandler makes the QP's receive goroutine call fn after each FPDU from
// the peer, once its payload is placed and what it completes is on the CQ;
// nil removes the handler.
//
// It is this software stack's substitute for polling: where a NIC places
// data and an application spins on a CQ or on registered memory, here every
// arrival would otherwise wake the application's goroutine from the
// receive goroutine, a hand-off that costs about as much as the rest of a
// loopback round trip. A handler runs the application's next step where the
// data landed instead (a Send or Write of up to 16 KiB that it posts goes
// out at once, on the same goroutine, with a write that never waits: what
// the socket does not take, and anything else that could make the receive
// goroutine wait for the socket, is handed to the transmit goroutine).
// While more FPDUs are already buffered whole behind the one just handled
// (a burst of requests), what the handler posts is held and goes out when
// the burst is taken, in one write rather than one per request, as the
// responses to a burst of RDMA Reads do.
//
// fn must not block or wait for the peer: nothing more arrives on this QP
// while it runs. Nor may it Close or Disconnect the QP, which wait for this
// goroutine: hand those to another one. It may poll CQs, post WRs and read
// registered memory. A call already under way may still run after
// SetRxHandler(nil) returns.
func (qp *QP) SetRxHandler(fn func()) {
	if fn == nil {
		qp.rxFn.Store(nil)
		return
	}
	qp.rxFn.Store(&fn)
}
