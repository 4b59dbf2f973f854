// Command iwarp-perf is a perftest-style benchmark for the goiwarp iWARP
// stack: ib_write_bw, ib_read_bw, ib_send_bw and their _lat siblings as
// write_bw, read_bw, send_bw, write_lat, read_lat and send_lat, with
// perftest's flags, banner and tables, and tcp_bw and tcp_lat, the same
// measurements over plain TCP sockets.
//
//	iwarp-perf                          # demo: RDMA Write vs raw TCP over loopback
//	iwarp-perf write_bw                 # server: wait for a client
//	iwarp-perf write_bw 192.0.2.1       # client
//	iwarp-perf send_lat --loopback -a   # both sides in this process
//	iwarp-perf write_bw -R 192.0.2.1    # client of Linux perftest's "ib_write_bw -R"
//
// A server also serves Linux perftest's clients ("ib_write_bw -R HOST"),
// with perftest's own exchange; -R makes a client speak it.
//
// Run iwarp-perf -h for the flags. The logic lives in internal/perf.
package main

import (
	"os"

	"github.com/goiwarp/iwarp/internal/perf"
)

func main() {
	os.Exit(perf.Main(os.Args[1:], os.Stdout, os.Stderr))
}
