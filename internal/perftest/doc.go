// Package perftest encodes and decodes the messages Linux perftest
// (ib_write_bw & co.) exchanges over its rdma_cm control connection in -R
// mode, so that iwarp-perf can run against perftest on siw or an iWARP NIC.
//
// Every message is one RDMA Send of a fixed size, in strict lock-step (the
// client sends first in each exchange); perftest posts a single 56-octet
// receive, so a message must have exactly the size the peer expects. All
// integers are big-endian. The layouts are perftest 6.06's (Debian
// bookworm), checked against captures of siw↔siw runs; perftest 6.29's
// 64-octet destination record is decoded too.
package perftest
