package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/goiwarp/iwarp/nvmeof/host"
	"github.com/goiwarp/iwarp/nvmeof/nvme"
)

// errFenced ends hold: the node's registration was preempted.
var errFenced = errors.New("fenced")

// hold registers key, takes the reservation if it is free, and writes a
// heartbeat every period, into the block of the first eight that is the
// node's (its key modulo 8), until ctx ends or the node is fenced, or a
// heartbeat cannot be written within timeout (the disk is lost: the node
// must stop by itself, as no notice will reach it).
func hold(ctx context.Context, m *host.Multipath, n *host.MultipathNamespace, key uint64, period, timeout time.Duration) error {
	if err := n.RegisterKey(ctx, key); err != nil {
		return fmt.Errorf("registering key %#x: %w", key, err)
	}
	st, err := n.ReservationReport(ctx)
	if err != nil {
		return err
	}
	if st.Type == 0 {
		err := n.Reserve(ctx, key, nvme.ResvWriteExclusiveRegsOnly)
		var se *nvme.StatusError
		switch {
		case errors.As(err, &se) && se.Status == nvme.StatusReservationConflict|nvme.DNR:
			fmt.Println("fence: another node reserved first; holding as a registrant")
		case err != nil:
			return fmt.Errorf("reserving: %w", err)
		}
	}
	if err := n.SetPersistence(ctx, true); err != nil {
		fmt.Printf("fence: the target cannot keep the reservation through power loss (%v)\n", err)
	}
	fmt.Printf("fence: holding with key %#x\n", key)
	notices := make(chan error, 1)
	go func() { notices <- watch(ctx, m) }() // ends with ctx or m
	beat := make([]byte, n.BlockSize())
	at := int64(key%8) * int64(len(beat))
	tick := time.NewTicker(period)
	defer tick.Stop()
	for i := uint64(1); ; i++ {
		copy(beat, fmt.Sprintf("heartbeat %d from key %#x at %s\n", i, key, time.Now().Format(time.RFC3339)))
		wctx, cancel := context.WithTimeout(ctx, timeout)
		_, err := n.WriteAtContext(wctx, beat, at)
		cancel()
		if err != nil {
			var se *nvme.StatusError
			if errors.As(err, &se) && se.Status == nvme.StatusReservationConflict|nvme.DNR {
				return errFenced // the notice was late, or lost: the write says it
			}
			return fmt.Errorf("heartbeat: %w", err)
		}
		select {
		case err := <-notices:
			return err
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// watch waits for the notification that this node's registration was
// preempted.
func watch(ctx context.Context, m *host.Multipath) error {
	for {
		ns, err := m.WaitReservationNotice(ctx)
		if err != nil {
			return err
		}
		for _, pn := range ns {
			fmt.Printf("fence: notice from %s: %v on namespace %d\n", pn.Addr, pn.Type, pn.NSID)
			if pn.Type == nvme.ResvNoticeRegPreempted {
				return errFenced
			}
		}
	}
}

// take fences the node registered with key victim, and shows the result.
func take(ctx context.Context, n *host.MultipathNamespace, key, victim uint64) error {
	if err := n.RegisterKey(ctx, key); err != nil {
		return fmt.Errorf("registering key %#x: %w", key, err)
	}
	if err := n.Preempt(ctx, key, victim, nvme.ResvWriteExclusiveRegsOnly, true); err != nil {
		return fmt.Errorf("preempting key %#x: %w", victim, err)
	}
	fmt.Printf("fence: key %#x fenced\n", victim)
	return show(ctx, n)
}

// show prints the reservation report.
func show(ctx context.Context, n *host.MultipathNamespace) error {
	st, err := n.ReservationReport(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("reservation: %v, generation %d, persists through power loss: %v\n", st.Type, st.Gen, st.PTPL)
	for _, r := range st.Registrants {
		holder := ""
		if r.Holder {
			holder = " (holder)"
		}
		fmt.Printf("  key %#x host %x%s\n", r.Key, r.HostID, holder)
	}
	return nil
}
