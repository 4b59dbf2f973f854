// Package perf is the engine of cmd/iwarp-perf: perftest's bandwidth and
// latency tests (ib_write_bw, ib_read_bw, ib_send_bw and their _lat
// siblings) over the goiwarp verbs, with perftest's flags, defaults, banner,
// tables and JSON keys, and the same measurements over plain TCP sockets
// for comparison.
//
// Files by concern:
//
//   - params.go, flags.go: the command line and perftest's defaults and
//     dependencies (force_dependecies).
//   - exchange.go: the out-of-band conversation (parameters, QP connection,
//     buffer addresses and RKeys, barriers, results) behind the Exchange
//     interface, so that perftest's wire-compatible exchange can replace
//     the native one.
//   - rdma.go: one side's resources (device, PD, CQ, QPs, memory regions).
//   - bw.go: the bandwidth loops, and the credit scheme send_bw needs on
//     iWARP (no receiver-not-ready retry).
//   - lat.go: the latency loops (ping-pong; RDMA Write latency polls memory).
//   - tcp.go: tcp_bw and tcp_lat and their control connection.
//   - report.go: perftest's arithmetic (print_report_bw, print_report_lat)
//     and formats.
//   - run.go: the roles of client and server, --loopback, the demo.
package perf
