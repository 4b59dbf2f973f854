package main

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/goiwarp/iwarp/tcpx"
	"github.com/goiwarp/iwarp/verbs"
)

// Bounds on the start-up and on a silent peer, for both sides.
const (
	startTimeout = 30 * time.Second
	// userTimeout is TCP_USER_TIMEOUT: how long data we sent may stay
	// unacknowledged before the connection is declared dead. Keep-alive
	// finds a dead peer only on an idle connection; on a WAN this finds one
	// mid-transfer.
	userTimeout = 30 * time.Second
)

// serve registers the file for remote reading and serves clients until
// it has served the given number (0: until ctx ends).
func serve(ctx context.Context, path string, port, ird, clients int, tcp tcpx.Config, tc *tls.Config) error {
	// The file is read into memory, which RegMR can register. (syscall.Mmap
	// would spare the copy, but a Read would then fault, killing the
	// server, if someone truncated the file while it is served.)
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if len(data) == 0 {
		return fmt.Errorf("%s is empty: nothing to serve", path)
	}
	sum := sha256.Sum256(data)
	if ird < 1 {
		return fmt.Errorf("-ird %d: a client needs at least one Read", ird)
	}
	dev, err := verbs.Open(verbs.DeviceAttr{MaxIRD: max(ird, verbs.DefaultDeviceAttr.MaxIRD)})
	if err != nil {
		return err
	}
	defer dev.Close()
	pd := dev.AllocPD()
	// RemoteRead alone: clients may read the file, never change it. One
	// region in one PD serves every client's QP.
	mr, err := pd.RegMR(data, verbs.RemoteRead)
	if err != nil {
		return err
	}
	// Nothing is ever posted on the server's QPs, so nothing completes; a
	// QP needs a CQ all the same, and one serves them all.
	cq, err := dev.CreateCQ(1)
	if err != nil {
		return err
	}
	o := offer{Addr: mr.Addr(), Len: uint64(mr.Len()), RKey: mr.RKey(), Sum: sum, Name: filepath.Base(path)}
	if offerLen+len(o.Name) > dev.Attr().MaxPrivData {
		o.Name = "" // the client must then choose a name with -o
	}
	adv := appendOffer(nil, o)

	ln, err := dev.Listen(ctx, "tcp", fmt.Sprintf(":%d", port), verbs.ConnConfig{TCP: tcp, TLS: tc})
	if err != nil {
		return err
	}
	log.SetPrefix("fetch serve: ")
	log.SetFlags(log.LstdFlags | log.Lmsgprefix)
	log.Printf("serving %s (%d octets, SHA-256 %x) on %v, up to %d Reads at once per client", path, len(data), sum, ln.Addr(), ird)

	// Each request is accepted and served on a goroutine of its own, so
	// that a client that stalls its start-up (its RTR never comes: up to
	// the Listener's RequestTimeout) holds up no other. Once -n clients
	// have connected no request is taken, and start-ups under way end. On
	// the way out the clients connected finish (or, once ctx has ended,
	// are closed) before the device closes.
	take, stopTaking := context.WithCancel(ctx)
	defer stopTaking()
	var wg sync.WaitGroup
	defer func() {
		ln.Close()
		wg.Wait()
	}()
	var mu sync.Mutex
	served := 0
	for {
		req, err := ln.GetRequest(take)
		if err != nil {
			if ctx.Err() != nil {
				log.Print("interrupted")
				return nil
			}
			if take.Err() != nil {
				return nil // -n clients served
			}
			return err
		}
		wg.Go(func() {
			qp, err := accept(take, req, pd, cq, ird, adv)
			if err != nil {
				log.Printf("%v: %v", req.RemoteAddr(), err)
				return
			}
			// Only a client that connects counts towards -n; one whose
			// Accept finished as the n-th did is turned away.
			mu.Lock()
			full := clients > 0 && served >= clients
			if !full {
				if served++; served == clients {
					stopTaking()
				}
			}
			mu.Unlock()
			if full {
				log.Printf("%v: -n %d clients served already", req.RemoteAddr(), clients)
				qp.Close()
				return
			}
			serveClient(ctx, req, qp)
		})
	}
}

// accept accepts a client's request on a QP of its own, whose IRD bounds
// the client's Reads in flight; ORD none: the server reads nothing of the
// client's.
func accept(ctx context.Context, req *verbs.ConnRequest, pd *verbs.PD, cq *verbs.CQ, ird int, adv []byte) (*verbs.QP, error) {
	qp, err := pd.CreateQP(verbs.QPConfig{SendCQ: cq, RecvCQ: cq, IRD: ird, ORD: -1,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
	if err != nil {
		req.Reject(nil)
		return nil, fmt.Errorf("refused: %w", err)
	}
	actx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	if err := req.Accept(actx, qp, adv); err != nil {
		req.Reject(nil) // what Accept refused before answering (a no-op after)
		qp.Close()
		return nil, fmt.Errorf("accept: %w", err)
	}
	return qp, nil
}

// serveClient waits until an accepted client leaves: the stack answers its
// Reads without the program's help.
func serveClient(ctx context.Context, req *verbs.ConnRequest, qp *verbs.QP) {
	who := req.RemoteAddr()
	defer qp.Close()
	log.Printf("%v: connected (%s); Reads at once: %d asked, %d allowed", who, tlsSummary(req.TLS), req.ORD, qp.Params().IRD)
	start := time.Now()
	how := "left"
	select {
	case <-qp.Done(): // the client disconnected, or the connection failed
		if err := qp.Err(); !errors.Is(err, verbs.ErrDisconnected) {
			how = fmt.Sprintf("failed (%v)", err)
		}
	case <-ctx.Done():
		how = "closed (interrupted)"
		qp.Close()
	}
	log.Printf("%v: %s after %v, %.1f MiB sent", who, how, time.Since(start).Round(time.Millisecond),
		float64(qp.Stats().OctetsSent)/(1<<20))
}
