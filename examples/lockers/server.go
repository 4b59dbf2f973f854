package main

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"log"
	"net"
	"sync"

	"github.com/goiwarp/iwarp/verbs"
)

// lockerSize is the size of each tenant's locker: a 4-octet length, then
// the contents.
const lockerSize = 4096

// offerLen is the Accept's private data: the locker's address, RKey and
// length.
const offerLen = 16

// tenant is what one client identity owns on the server: a PD, and in it
// the locker. It outlives connections: the next connection of the same
// identity finds what the last one wrote.
type tenant struct {
	pd     *verbs.PD
	locker *verbs.MR
}

// server maps verified identities to tenants.
type server struct {
	dev     *verbs.Device
	cq      *verbs.CQ
	mu      sync.Mutex
	tenants map[string]*tenant
}

// serve runs the server on addr until ctx ends; ready is told the address
// once it listens.
func serve(ctx context.Context, addr string, tc *tls.Config, ready func(net.Addr)) error {
	dev, err := verbs.Open(verbs.DeviceAttr{})
	if err != nil {
		return err
	}
	defer dev.Close()
	cq, err := dev.CreateCQ(1) // nothing is posted on the server's QPs
	if err != nil {
		return err
	}
	s := &server{dev: dev, cq: cq, tenants: map[string]*tenant{}}
	ln, err := dev.Listen(ctx, "tcp", addr, verbs.ConnConfig{TLS: tc})
	if err != nil {
		return err
	}
	ready(ln.Addr())
	// Each request is accepted and served on a goroutine of its own, so
	// that a client that stalls its start-up (its RTR never comes: up to
	// the Listener's RequestTimeout) holds up no other. On the way out
	// they all end before the device closes.
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		ln.Close()
		wg.Wait()
	}()
	for {
		req, err := ln.GetRequest(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		wg.Go(func() {
			qp, err := s.accept(ctx, req)
			if err != nil {
				log.Printf("lockers: %v: %v", req.RemoteAddr(), err)
				return
			}
			select {
			case <-qp.Done():
			case <-ctx.Done():
			}
			qp.Close()
		})
	}
}

// accept picks the PD from the identity the TLS handshake verified and
// accepts the client's QP in it.
func (s *server) accept(ctx context.Context, req *verbs.ConnRequest) (*verbs.QP, error) {
	// The Listener's tls.Config requires a verified client certificate:
	// without one there is no request.
	id := req.TLS.VerifiedChains[0][0].Subject.CommonName
	t, err := s.tenant(id)
	if err != nil {
		req.Reject([]byte("no locker"))
		return nil, err
	}
	qp, err := t.pd.CreateQP(verbs.QPConfig{SendCQ: s.cq, RecvCQ: s.cq, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
	if err != nil {
		req.Reject(nil)
		return nil, err
	}
	offer := binary.BigEndian.AppendUint64(nil, t.locker.Addr())
	offer = binary.BigEndian.AppendUint32(offer, t.locker.RKey())
	offer = binary.BigEndian.AppendUint32(offer, uint32(t.locker.Len()))
	if err := req.Accept(ctx, qp, offer); err != nil {
		req.Reject(nil) // what Accept refused before answering (a no-op after)
		qp.Close()
		return nil, err
	}
	log.Printf("lockers: %v is %q", req.RemoteAddr(), id)
	return qp, nil
}

// tenant returns id's tenant, made on its first connection.
func (s *server) tenant(id string) (*tenant, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.tenants[id]; ok {
		return t, nil
	}
	pd := s.dev.AllocPD()
	mr, err := pd.RegMR(make([]byte, lockerSize), verbs.LocalWrite|verbs.RemoteWrite|verbs.RemoteRead)
	if err != nil {
		return nil, err
	}
	t := &tenant{pd: pd, locker: mr}
	s.tenants[id] = t
	return t, nil
}
