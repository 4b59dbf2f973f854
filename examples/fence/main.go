// Command fence is the storage fencing of a two-node cluster, on NVMe
// reservations over iWARP: the shared disk is an NVMe namespace that both
// nodes reach through NVMe/RDMA (this repository's host, to any target:
// iwarp-nvmet, Linux's nvmet where it has reservations, an iWARP array),
// and the node that holds the reservation is the one that may write.
//
//	fence hold [-key K] [-id HOSTID] [-beat D] [-timeout D] [-nqn NQN] [-nsid N] ADDR[,ADDR...]
//	fence take -victim K [-key K] [-id HOSTID] [-nqn NQN] [-nsid N] ADDR[,ADDR...]
//	fence show [-nqn NQN] [-nsid N] ADDR[,ADDR...]
//
// hold registers the node's key, takes a Write Exclusive - Registrants
// Only reservation if none is held (the other registered node may write
// too: the reservation is there to be taken from a failed node), asks the
// target to keep it through power loss, and then writes a heartbeat block
// (the namespace's block key mod 8) every -beat until the node is fenced: another node's preemption,
// which the target announces (a Reservation Notification), ends it with
// exit status 3, before its next write would have been refused. take is
// what the surviving node runs when it declares the other dead: it
// preempts the victim's key (Preempt and Abort), so that every write the
// victim still sends is refused, and prints who holds what. show prints
// the reservation report. A node that loses the disk (no path left, or
// a heartbeat slower than -timeout) exits with status 1: no notice can
// reach it, so it must stop by itself, as a cluster's nodes do.
//
// Several addresses are the target's ports, one path each (Multipath): a
// node is fenced through every path at once, and told through whichever
// still reaches the target. A node's host identifier (-id) must stay the
// same across restarts: registrations are the host's, not the
// connection's.
package main

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/host"
)

// fencedStatus is hold's exit status once the node is fenced.
const fencedStatus = 3

func main() { os.Exit(run(os.Args[1:])) }

// run runs a command and returns the exit status, once the connections
// are closed.
func run(args []string) int {
	if len(args) < 1 {
		return usage()
	}
	cmd := args[0]
	fs := flag.NewFlagSet("fence "+cmd, flag.ExitOnError)
	nqn := fs.String("nqn", "nqn.2024-01.io.goiwarp:shared", "the shared disk's subsystem `NQN`")
	nsid := fs.Uint("nsid", 1, "its namespace")
	key := fs.Uint64("key", 0, "this node's reservation `key` (not 0)")
	id := fs.String("id", "", "this node's host identifier, 32 hex digits (default: from the key)")
	victim := fs.Uint64("victim", 0, "take: the failed node's `key`")
	beat := fs.Duration("beat", time.Second, "hold: the time between heartbeats")
	timeout := fs.Duration("timeout", 10*time.Second, "hold: give up (exit 1) when a heartbeat takes longer: the disk is lost")
	fs.Parse(args[1:])
	if fs.NArg() != 1 || cmd != "show" && *key == 0 || cmd == "take" && *victim == 0 || *beat <= 0 || *timeout <= 0 {
		return usage()
	}
	hostID, err := parseHostID(*id, *key)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fence:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	m, err := host.ConnectMultipath(cctx, "tcp", strings.Split(fs.Arg(0), ","), *nqn, host.MultipathConfig{
		Config: host.Config{IOQueues: 1, HostID: hostID, WatchReservations: true}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "fence:", err)
		return 1
	}
	defer m.Close()
	n, err := m.Namespace(cctx, uint32(*nsid))
	if err == nil {
		switch cmd {
		case "hold":
			err = hold(ctx, m, n, *key, *beat, *timeout)
			if ctx.Err() != nil && !errors.Is(err, errFenced) {
				return 0 // told to stop: the node leaves, registered
			}
		case "take":
			err = take(cctx, n, *key, *victim)
		case "show":
			err = show(cctx, n)
		default:
			return usage()
		}
	}
	switch {
	case errors.Is(err, errFenced):
		fmt.Println("fence: fenced: another node preempted this one; stopping its writes")
		return fencedStatus
	case err != nil:
		if ctx.Err() != nil {
			err = fmt.Errorf("interrupted (%w)", err)
		}
		fmt.Fprintln(os.Stderr, "fence:", err)
		return 1
	}
	return 0
}

func usage() int {
	fmt.Fprintln(os.Stderr, "usage: fence hold [-key K] [-id HOSTID] [-beat D] [-timeout D] [-nqn NQN] [-nsid N] ADDR[,ADDR...]")
	fmt.Fprintln(os.Stderr, "       fence take -victim K [-key K] [-id HOSTID] [-nqn NQN] [-nsid N] ADDR[,ADDR...]")
	fmt.Fprintln(os.Stderr, "       fence show [-nqn NQN] [-nsid N] ADDR[,ADDR...]")
	return 2
}

// parseHostID reads a host identifier, or makes one from the key: the same
// key, the same host, across restarts.
func parseHostID(s string, key uint64) ([16]byte, error) {
	var id [16]byte
	if s == "" {
		copy(id[:], "goiwarp-")
		binary.BigEndian.PutUint64(id[8:], key)
		return id, nil
	}
	b, err := hex.DecodeString(strings.ReplaceAll(s, "-", ""))
	if err != nil || len(b) != 16 {
		return id, fmt.Errorf("-id %q: want 32 hex digits", s)
	}
	copy(id[:], b)
	return id, nil
}
