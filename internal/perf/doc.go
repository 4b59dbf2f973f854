// Package perf is the engine of cmd/iwarp-perf: perftest's bandwidth and
// latency tests (ib_write_bw, ib_read_bw, ib_send_bw, ib_atomic_bw and their
// _lat siblings; the atomics are RFC 7306's) over the goiwarp verbs, with
// perftest's flags, defaults, banner, tables and JSON keys, and the same measurements over plain TCP sockets
// for comparison.
//
// Files by concern:
//
//   - options.go: the table of flags, perftest's short and long names,
//     grouped by the tests they serve, and the steps that convert and
//     check each; flags.go: Parse and the flag values; usage.go: the help.
//   - rules.go: the rules that fill perftest's defaults by kind of test and
//     check the flags against the test and each other (perftest's
//     force_dependecies); params.go: Params and the tests.
//   - exchange.go: the out-of-band conversation (parameters, QP connection,
//     buffer addresses and RKeys, barriers, results) behind the Exchange
//     interface: iwarp-perf's own.
//   - perftest_exchange.go: Linux perftest's -R exchange behind the same
//     interface (-R, or a perftest peer detected), so that either side can
//     be ib_write_bw -R and co.; its messages are in internal/perftest.
//   - rdma.go: one side's resources (device, PD, CQ, QPs, memory regions).
//   - bw.go: the bandwidth loops, and the credit scheme send_bw needs on
//     iWARP (no receiver-not-ready retry).
//   - atomic.go: the atomic tests' operands and the read-back that checks
//     the target word after a run.
//   - lat.go: the latency loops (ping-pong; RDMA Write latency polls memory).
//   - tcp.go: tcp_bw and tcp_lat and their control connection.
//   - report.go: perftest's arithmetic (print_report_bw, print_report_lat)
//     and formats.
//   - run.go: the roles of client and server, --loopback, the demo.
//   - serve.go: a server that hostile clients cannot wedge: one client at a
//     time, the others refused as busy, a deadline on every wait on the
//     peer (--exchange-timeout), --max-region, and the loop that drops a
//     failed client and serves the next.
//
// # Linux perftest
//
// Either side may be Linux perftest's ib_TEST -R (rdma_cm), on siw or an
// iWARP NIC. A server tells the two exchanges apart by the client's MPA
// Request: iwarp-perf's carries a hello in its private data, perftest's
// none. A client speaks perftest's exchange with -R, and also goes over to
// it when the server's MPA Reply has no private data (perftest's server).
// -R also selects perftest's defaults: no MPA CRCs (--crc), -o 128 for read
// tests and 1 otherwise, and --fpdu-delay 200 ms when dialing (siw as
// responder loses a first FPDU that arrives too soon after its Reply). In
// perftest's exchange, send_bw uses perftest's iWARP credits (bw.go),
// write_lat's server writes first, and each side prints what perftest's
// would. perftest checks no parameter of its peer, so -s, -n, -q and -r
// must be given alike, as between two perftests. -a and -b follow perftest's
// per-size synchronisation (perftest_exchange.go: a write_bw or read_bw
// server without -b runs only the last size, as perftest's); -D is supported
// for write_bw and read_bw only. interop/perftest_test.go runs every test
// both ways against perftest 6.06 on siw.
package perf
