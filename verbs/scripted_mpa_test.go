package verbs

import (
	"bytes"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/ddp"
	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/rdmap"
	"github.com/stretchr/testify/require"
)

// MPA framing errors (RFC 5044 section 8) from the scripted raw peer of
// scripted_test.go.

// MPA errors: RFC 5044 section 8, reported as layer LLP, error type MPA,
// with no headers (RFC 5040 Figure 10): the Terminate header is
// 20 <code> 00 00.
func TestScriptedMPAErrors(t *testing.T) {
	checkRoutines(t) // once for all subtests: the check costs 0.4 s
	t.Run("bad CRC on a Write", func(t *testing.T) {
		// RFC 5044 section 8: 0x02 "MPA CRC error". Placement
		// before the CRC check is allowed (hardware and siw do it), so the
		// region may have changed; its guards may not.
		s := startScenario(t, scenarioOpts{recvs: 2})
		require.True(t, s.p.params.CRC)
		b := s.p.encode(t, writeULPDU(s.dst.mr.RKey(), s.dst.mr.Addr()+8, payload16))
		b[len(b)-1] ^= 0xff
		s.p.write(t, b)
		s.mayPlace[s.dst] = true
		s.wantTerminate(t, llpTerm(mpa.CodeCRC))
		// Placed, maybe, but not counted: MR.Placed counts a Write once
		// its last FPDU's CRC has checked out.
		require.Zero(t, s.dst.mr.Placed(), "a Write whose CRC failed was counted as placed")
	})
	t.Run("bad CRC on a Send is not delivered", func(t *testing.T) {
		// The Send was placed, but a message whose CRC fails must not be
		// delivered: the FPDU is not a valid DDP segment (RFC 5044 section
		// 8 makes the CRC error fatal), and RFC 5041 section 5.4 delivers a
		// message only once all its segments were placed. Its receive
		// completes with WRFlushErr, not Success.
		s := startScenario(t, scenarioOpts{recvs: 2})
		b := s.p.encode(t, sendULPDU(rdmap.OpSend, 0, rdmap.QNSend, 1, 0, true, payload16))
		b[len(b)-1] ^= 0xff
		s.p.write(t, b)
		s.mayPlace[s.rbuf] = true
		s.wantTerminate(t, llpTerm(mpa.CodeCRC), WRFlushErr, WRFlushErr)
	})
	t.Run("bad CRC on a Send with Invalidate does not invalidate", func(t *testing.T) {
		// Nor may it invalidate anything: the STag it names could be
		// corrupted too.
		s := startScenario(t, scenarioOpts{recvs: 1, noRead: true})
		fmr, err := s.st.pd.AllocMR()
		require.NoError(t, err)
		_, err = s.q.qp.PostRegMR(1, Signaled, fmr, make([]byte, 64), LocalWrite|RemoteWrite)
		require.NoError(t, err)
		require.Equal(t, Success, waitWC(t, s.q.scq).Status)
		require.True(t, fmr.Valid())
		b := s.p.encode(t, sendULPDU(rdmap.OpSendInvalidate, fmr.RKey(), rdmap.QNSend, 1, 0, true, payload16))
		b[len(b)-1] ^= 0xff
		s.p.write(t, b)
		s.mayPlace[s.rbuf] = true
		s.p.wantTerminate(t, llpTerm(mpa.CodeCRC))
		s.p.wantClosed(t)
		s.p.close()
		waitDone(t, s.q.qp, peerTimeout)
		require.True(t, fmr.Valid(), "an STag was invalidated by a Send whose CRC failed")
		s.checkAfter(t, []WCStatus{WRFlushErr})
	})
	t.Run("bad CRC on a Read Request is not served", func(t *testing.T) {
		// A Read Request may be acted on only once its CRC checked out: a
		// corrupted one could name any region. The CRC octets are held back
		// for a while, so that a stack that serves the request before
		// checking them shows it every time.
		s := startScenario(t, scenarioOpts{recvs: 1})
		b := s.p.encode(t, readReqULPDU(1, 0xabcd0001, 0x5000, 16, s.dst.mr.RKey(), s.dst.mr.Addr()))
		b[len(b)-1] ^= 0xff
		s.p.write(t, b[:len(b)-mpa.CRCLen])
		s.p.wantNothing(t, 200*time.Millisecond, "a Read Request was served before its CRC arrived")
		s.p.write(t, b[len(b)-mpa.CRCLen:])
		s.wantTerminate(t, llpTerm(mpa.CodeCRC))
	})
	t.Run("bad CRC on the last Read Response: the Read does not complete", func(t *testing.T) {
		// Same for the Read Response that completes our Read: until its CRC
		// checked out the Read is not complete, so the fenced Send behind
		// it must stay where it is.
		s := startScenario(t, scenarioOpts{recvs: 1})
		u := append(writeULPDUOp(rdmap.OpReadResponse, s.readReq.SinkSTag(), s.readReq.SinkTO()), bytes.Repeat([]byte{3}, 32)...)
		b := s.p.encode(t, u)
		b[len(b)-1] ^= 0xff
		s.p.write(t, b[:len(b)-mpa.CRCLen])
		s.mayPlace[s.sink] = true
		s.p.wantNothing(t, 200*time.Millisecond, "the Read completed (and released the fenced Send) before its CRC arrived")
		s.p.write(t, b[len(b)-mpa.CRCLen:])
		s.wantTerminate(t, llpTerm(mpa.CodeCRC))
	})
	t.Run("bad marker at the first FPDU", func(t *testing.T) {
		// The stack asked for markers (M in its Reply, RFC 5044 section
		// 7.1). The first FPDU starts on a marker position, so a marker with
		// FPDUPTR 0 precedes it (section 5); a wrong pointer is 0x03 "MPA
		// Marker and ULPDU Length field mismatch".
		s := startScenario(t, scenarioOpts{recvs: 2, server: ConnConfig{MPA: mpa.Config{MarkersRx: true}}})
		require.True(t, s.p.params.MarkersTx)
		b := s.p.encode(t, sendULPDU(rdmap.OpSend, 0, rdmap.QNSend, 1, 0, true, payload16))
		require.Equal(t, []byte{0, 0, 0, 0}, b[:4], "the first marker")
		b[3] = 4
		s.p.write(t, b)
		s.wantTerminate(t, llpTerm(mpa.CodeMarker))
	})
	t.Run("bad marker inside an FPDU", func(t *testing.T) {
		// The marker at stream octet 512 falls in the payload of a Write
		// that started at octet 4: its FPDUPTR must be 508.
		s := startScenario(t, scenarioOpts{recvs: 2, server: ConnConfig{MPA: mpa.Config{MarkersRx: true}}})
		b := s.p.encode(t, writeULPDU(s.dst.mr.RKey(), s.dst.mr.Addr(), bytes.Repeat([]byte{7}, 600)))
		require.Equal(t, []byte{0, 0, 0x01, 0xfc}, b[512:516], "the marker at octet 512")
		b[515] = 0xf8
		s.p.write(t, b)
		s.mayPlace[s.dst] = true
		s.wantTerminate(t, llpTerm(mpa.CodeMarker))
	})
	t.Run("ULPDU length 0", func(t *testing.T) {
		// An FPDU with nothing in it cannot hold a DDP header. The MPA
		// framing is valid, so this is DDP's to report; RFC 5041 has no
		// code for a short segment, so it is a local catastrophic error
		// (no headers), as ddp.Parse says too.
		s := startScenario(t, scenarioOpts{recvs: 2})
		b := s.p.encode(t, []byte{})
		require.Len(t, b, mpa.MinFPDU)
		s.p.write(t, b)
		s.wantTerminate(t, rdmap.Terminate{Layer: rdmap.LayerDDP, EType: uint8(ddp.ETypeCatastrophic)})
	})
	t.Run("closed inside a DDP header", func(t *testing.T) {
		// RFC 5044 section 8 0x01 "TCP connection closed, terminated or
		// lost" in the middle of an FPDU; the peer only half-closed, so the
		// Terminate can still reach it.
		s := startScenario(t, scenarioOpts{recvs: 2})
		b := s.p.encode(t, sendULPDU(rdmap.OpSend, 0, rdmap.QNSend, 1, 0, true, payload16))
		s.p.write(t, b[:2+5])
		s.p.closeWrite(t)
		s.wantTerminate(t, llpTerm(mpa.CodeStreamLost))
	})
	t.Run("closed inside the payload", func(t *testing.T) {
		s := startScenario(t, scenarioOpts{recvs: 2})
		b := s.p.encode(t, sendULPDU(rdmap.OpSend, 0, rdmap.QNSend, 1, 0, true, bytes.Repeat([]byte{9}, 40)))
		s.p.write(t, b[:2+18+10])
		s.p.closeWrite(t)
		s.mayPlace[s.rbuf] = true
		s.wantTerminate(t, llpTerm(mpa.CodeStreamLost))
	})
	t.Run("closed before the CRC: not delivered", func(t *testing.T) {
		// The whole ULPDU arrived but not its CRC: with CRCs negotiated the
		// message cannot be delivered.
		s := startScenario(t, scenarioOpts{recvs: 2})
		b := s.p.encode(t, sendULPDU(rdmap.OpSend, 0, rdmap.QNSend, 1, 0, true, bytes.Repeat([]byte{9}, 40)))
		s.p.write(t, b[:len(b)-mpa.CRCLen])
		s.p.closeWrite(t)
		s.mayPlace[s.rbuf] = true
		s.wantTerminate(t, llpTerm(mpa.CodeStreamLost), WRFlushErr, WRFlushErr)
	})
	t.Run("garbage after a valid FPDU", func(t *testing.T) {
		// The valid Send is delivered; the garbage reads as an FPDU of
		// 65535 octets whose DDP control octet 0xff is tagged with DV 3:
		// DDP tagged buffer error 0x04, invalid DDP version.
		s := startScenario(t, scenarioOpts{recvs: 2})
		garbage := bytes.Repeat([]byte{0xff}, 32)
		s.p.write(t, append(s.p.encode(t, sendULPDU(rdmap.OpSend, 0, rdmap.QNSend, 1, 0, true, []byte("good"))), garbage...))
		s.mayPlace[s.rbuf] = true
		want := ddpTerm(ddp.ETypeTagged, ddp.CodeTaggedVersion, garbage[2:])
		want.SegLen = 0xffff
		s.wantTerminate(t, want, Success)
		require.Equal(t, "good", string(s.rbuf.region()[:4]))
	})
}

// With CRCs not negotiated (neither frame had C, RFC 5044 section 7.1) the
// CRC field means nothing: a Send with junk there is delivered.
func TestScriptedCRCIgnoredWhenOff(t *testing.T) {
	checkRoutines(t)
	s := startScenario(t, scenarioOpts{recvs: 1, noRead: true, server: ConnConfig{MPA: mpa.Config{CRC: mpa.CRCOff}},
		peer: &mpa.Config{CRC: mpa.CRCOff, IRD: 8, ORD: 8}})
	require.False(t, s.p.params.CRC)
	b := s.p.encode(t, sendULPDU(rdmap.OpSend, 0, rdmap.QNSend, 1, 0, true, []byte("no crc")))
	copy(b[len(b)-4:], []byte{0xde, 0xad, 0xbe, 0xef})
	s.p.write(t, b)
	wc := waitWC(t, s.q.rcq)
	require.Equal(t, wcString(1, WCRecv, Success), wcOf(wc))
	require.Equal(t, "no crc", string(s.rbuf.region()[:wc.ByteLen]))
	s.p.closeWrite(t)
	s.p.wantClosed(t)
	waitDone(t, s.q.qp, peerTimeout)
	require.ErrorIs(t, s.q.qp.Err(), ErrDisconnected)
}
