package perf

// Usage is the help text.
const Usage = `Usage: iwarp-perf [TEST] [options] [SERVER]

perftest-style benchmarks for the goiwarp iWARP stack. Without SERVER the
test listens and serves clients one at a time until one run has completed
(--runs); with SERVER it connects to one; --loopback runs both sides in this
process over 127.0.0.1. With no TEST it
runs the demo: RDMA Write bandwidth at 64 KiB over loopback for 3 seconds,
then the same over plain TCP sockets, and compares them. Either side may be
Linux perftest's ib_TEST -R (see "With Linux perftest" below).

Tests: write_bw read_bw send_bw write_lat read_lat send_lat tcp_bw tcp_lat
       atomic_bw atomic_lat (RFC 7306 atomics: 8 octets; both sides enable RFC 7306)

Options (perftest's meanings; SYMMETRIC ones must match on both sides):
  -s, --size=N          message size (default 65536 for BW, 2 for LAT) (SYMMETRIC)
                        (K, M: KiB, MiB, as perftest)
  -a, --all             run sizes 2 .. 2^23 (SYMMETRIC)
  -n, --iters=N         iterations (default 5000 write_bw, 1000 others) (SYMMETRIC)
  -D, --duration=SEC    run for SEC seconds instead of -n (SYMMETRIC)
  -f, --margin=SEC      with -D, measure only after SEC seconds and until SEC before the
                        end (default a quarter of -D) (SYMMETRIC)
  -q, --qp=N            number of QPs (connections for tcp_*) (SYMMETRIC)
  -t, --tx-depth=N      send queue depth (default 128 BW, 1 LAT)
  -r, --rx-depth=N      receive queue depth for send tests (default 512) (SYMMETRIC)
  -p, --port=N          TCP port to listen on or connect to (default 18515)
  -b, --bidirectional   measure both directions at once (SYMMETRIC)
      --report-both     with -b, BW tests: also a table of this side's and one of the peer's results
  -I, --inline_size=N   largest message sent inline (default 220 write_lat, 236 send_lat, 0 otherwise)
  -A, --atomic_type=T   CMP_AND_SWAP or FETCH_AND_ADD (default), atomic tests (SYMMETRIC)
  -o, --outs=N          outstanding RDMA Reads and atomics: the QP's IRD and ORD (default 128 for
                        read and atomic tests, as perftest: the device's maximum; 16 otherwise, and 1
                        with -R)
  -Q, --cq-mod=N        signal every N-th send WR (default 100; 1 above 8 KiB unless given)
      --cq-wake=N       bandwidth tests: wake the test's loop once N completions have queued,
                        or when its QPs' receive side runs out of data (CQ moderation,
                        verbs.CQ.SetModeration; default 16, at most tx-depth/8; 1: every one)
  -N, --noPeak          no BW peak (it is not computed above 20000 iterations anyway)
  -l, --post_list=N     BW tests: post send WRs in lists of N, one PostSend each (-Q
                        defaults to N; -n a multiple of N)
      --run_infinitely  BW tests: run until the client is interrupted, a row every -D
                        seconds (default 5) (SYMMETRIC; with -R: write_bw and read_bw)
  -e, --events          wait for completions by blocking on the CQ, never spinning on it
                        (not in write_lat, which waits on memory)
  -H, --report-histogram  latency tests: also print every sample, sorted
      --latency_gap=US  latency tests: spin US microseconds before each post (as perftest,
                        the latency reported includes the gaps)
  -U, --report-unsorted   latency tests: also print every sample in order
  -V, --version         print the version
  -w, --limit_bw=F, -y, --limit_msgrate=F  BW tests: exit 1 ("Error: BW result is below bw
                        limit") unless a row's average reaches F (MiB/s, or Gb/s with
                        --report_gbits; Mpps), for scripts
      --report_gbits    report Gb/s instead of MiB/s
      --output=WHAT     print only one number: bandwidth, message_rate or latency
      --out_json        also write the results as JSON to perftest_out.json
      --out_json_file=F write the JSON to F (implies --out_json)
      --loopback        run server and client in this process over 127.0.0.1
      --ipv6-addr       reach the server by its IPv6 address (--loopback: over ::1)
      --perform_warm_up write/read/atomic BW: tx-depth WRs on each QP, completed, before
                        the clock starts (other tests: ignored, as perftest)
      --bind_source_ip=IP  client: connect from this address of ours
      --use-srq         send tests: the receives of all QPs come from one shared receive queue
                        (also --use_srq)
      --floor           tcp_bw: each side also does the work per octet that MPA over a
                        socket cannot avoid (the sender the CRC32c of every FPDU's
                        payload, the receiver the copy of each out of its read buffer,
                        with its CRC32c; the copy alone with --crc=off): the least
                        user time a user-space iWARP stack can spend over TCP
  -R, --rdma_cm         speak perftest's -R exchange (wire-compatible with ib_TEST -R)
  -z, --comm_rdma_cm    with -R, which implies it: taken (perftest's exchange over
                        rdma_cm); without -R refused, as iWARP QPs connect only
                        through rdma_cm
  -d, -i, -x, -m, -F    perftest's device, port, GID index, MTU and CPU frequency check:
                        taken and ignored (the stack runs over TCP, its FPDUs sized by
                        TCP's MSS: see --fpdu); -c takes RC only; so are the fabric's
                        -S, -T, -u, --tclass, --hop_limit, --retry_count, --flow_label, --ipv6,
                        --cpu_util (the CPU line is always printed) and --mr_per_qp
                        (each QP always has its own region)
  Short options may be joined as getopt's: -n100, -ab.
      --lat-wait=handler|poll  latency tests: take each step on the QP's receive
                        goroutine as data lands (default), or poll memory and the CQ
                        from the test's own goroutine, as perftest does
iWARP options (both sides alike):
      --mpa-rev=1|2     MPA revision (default 2)
      --crc=on|off|required|strict   MPA CRC policy (default on; off with -R)
      --markers=none|tx|rx|both      MPA markers; tx is client to server (default none)
      --p2p=none|send|write|read     peer-to-peer mode with that RTR message (default none)
      --fpdu=N          cap the FPDU size at N octets (default: the TCP segment)
      --fpdu-per-segment  hand TCP one FPDU per write, so that each segment starts an
                        FPDU (for analyzers that assume it: Wireshark with markers)
      --fpdu-delay=MS   when connecting, hold our first FPDU back MS ms after the MPA
                        Reply (default 0; 200 with -R): siw as responder loses one
                        that comes too soon
TCP under every connection: QPs, tcp_* sockets, listeners (give them to both sides; docs/wan.md):
      --cc=ALGO         TCP congestion control, e.g. bbr, cubic, reno (default: the system's)
      --mptcp           Multipath TCP (RFC 8684); a peer without it falls back to TCP
      --sockbuf=SIZE    socket send and receive buffers (default 0: the kernel's autotuning;
                        K, M: KiB, MiB; capped by net.core.wmem_max and rmem_max)
TLS (both sides alike; docs/tls.md):
      --tls             every connection inside TLS 1.3 with a throw-away self-signed
                        certificate the client does not verify: a quick measurement,
                        no authentication
      --tls-cert=FILE --tls-key=FILE  our certificate and key (PEM); a server needs them
      --tls-ca=FILE     the CA certificates (PEM) that sign the peer's: a client verifies
                        the server with them, a server then requires client certificates
Serving (see "A server and its clients" below):
      --runs=N          server: exit after N completed runs (default 1, as perftest; 0: serve
                        until interrupted)
      --exchange-timeout=T  the longest wait on the peer (default 15s; seconds or 500ms, 2m):
                        each message and QP of the exchange, and the test while nothing
                        moves on its connections; also shortens the MPA start-up's timeouts
      --max-region=SIZE most memory registered for the test's QPs, whatever the peer asks
                        (default 256MiB; K, M, G: KiB, MiB, GiB)
Diagnostics:
      --profile=cpu|mem|mutex|block|trace   write cpu.pprof, mem.pprof, ... in the working
                        directory (github.com/pkg/profile)
  -h, --help            this text

With Linux perftest (5.70 to 6.27, and 6.29 untested; tested: 6.06 on siw):
  iwarp-perf TEST -R [options] HOST   runs against "ib_TEST -R [options]" on HOST
  iwarp-perf TEST [options]           serves "ib_TEST -R [options] OURHOST" as well
                                      as iwarp-perf clients: a server tells them apart
                                      by their MPA Request
  A client without -R that finds a perftest server goes on with perftest's
  exchange too. perftest checks no parameter: give both sides the same -s, -n
  and -q (and -r for send_bw), as between two perftests. With perftest's
  exchange, send_bw uses perftest's credits (the receiver RDMA Writes its
  receive count to the sender), write_lat's server writes first, the
  write_bw/read_bw server shows the client's numbers, a send_bw server its
  own, and read_lat's server none. -a and -b work as in perftest (with -a a
  write_bw/read_bw server shows the last size); -D only for write_bw/read_bw.

A server and its clients:
  A server runs one test at a time. Whoever reaches its port can connect
  (iWARP has no authentication of its own; --tls-ca makes a server require
  client certificates). A client that fails is dropped, with the
  reason on stderr ("iwarp-perf: client ADDR: ...; dropped"), and the server
  waits for the next: one that sends nothing for --exchange-timeout, closes
  or sends what the exchange does not expect, asks for other parameters
  (rejected with the differences), or whose perftest page size would make
  the regions larger than --max-region. A client that comes while another
  is served waits a second at most, in case that test ends, and is then
  rejected as busy (tcp_* clients wait, up to their --exchange-timeout).
  The server exits 0 once --runs runs have completed, and 1 if interrupted
  first.
`
