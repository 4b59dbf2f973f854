package verbs

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"github.com/goiwarp/iwarp/ddp"
	"github.com/goiwarp/iwarp/mpa"
	"github.com/goiwarp/iwarp/rdmap"
)

// FuzzQPReceive drives a whole QP receive path — MPA reader, DDP/RDMAP
// checks, placement into registered memory, Read Responses, Terminates —
// from arbitrary octets. The QP must never panic or hang, must end in
// ERROR when the stream ends, and must never touch memory outside its
// registered regions (guard octets around them stay zero).
func FuzzQPReceive(f *testing.F) {
	seed := func(crc bool, ulpdus ...[]byte) []byte {
		var b bytes.Buffer
		w := mpa.NewWriter(&b, crc, false)
		for _, u := range ulpdus {
			w.Append(u, nil)
		}
		w.Flush()
		return b.Bytes()
	}
	// STags are random per run; the fuzzer finds its way through the
	// other checks, and the seeds cover each opcode's header.
	send := ddp.AppendUntagged(nil, true, rdmap.Ctrl(rdmap.OpSend), 0, rdmap.QNSend, 1, 0)
	send = append(send, "hello"...)
	write := ddp.AppendTagged(nil, true, rdmap.Ctrl(rdmap.OpWrite), 0x100, 0)
	write = append(write, "data"...)
	rreq := ddp.AppendUntagged(nil, true, rdmap.Ctrl(rdmap.OpReadRequest), 0, rdmap.QNReadRequest, 1, 0)
	rreq = rdmap.AppendReadRequest(rreq, 1, 0, 16, 0x100, 0)
	term := rdmap.Terminate{Layer: rdmap.LayerDDP, EType: 1}.Append(rdmap.AppendTerminateDDP(nil))
	for _, crc := range []bool{false, true} {
		f.Add(seed(crc, send), crc)
		f.Add(seed(crc, write, send), crc)
		f.Add(seed(crc, rreq), crc)
		f.Add(seed(crc, term), crc)
		f.Add(seed(crc, send, send, rreq, write), crc)
	}
	f.Fuzz(func(t *testing.T, data []byte, crc bool) {
		d := openDev(DeviceAttr{})
		pd := d.AllocPD()
		scq, _ := d.CreateCQ(64)
		rcq, _ := d.CreateCQ(64)
		qp, err := pd.CreateQP(QPConfig{SendCQ: scq, RecvCQ: rcq, IRD: 4, ORD: 4,
			Cap: QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 2, MaxRecvSGE: 2}})
		if err != nil {
			t.Fatal(err)
		}
		mem := make([]byte, 3*4096)
		mr, _ := pd.RegMR(mem[4096:8192], LocalWrite|RemoteWrite|RemoteRead)
		for i := 0; i < 4; i++ {
			qp.PostRecv(RecvWR{ID: uint64(i), SGL: []SGE{mr.SGE(i*1024, 1024)}})
		}
		local, remote := net.Pipe()
		p := mpa.Params{Rev: 2, CRC: crc, IRD: 4, ORD: 4}
		if err := qp.start(local, p, ConnConfig{ReadBuffer: 4096}, false); err != nil {
			t.Fatal(err)
		}
		go io.Copy(io.Discard, remote) // whatever the QP sends back
		remote.SetWriteDeadline(time.Now().Add(2 * time.Second))
		remote.Write(data)
		remote.Close()
		select {
		case <-qp.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("QP did not reach ERROR after its stream ended")
		}
		qp.Close()
		for i, b := range mem {
			if (i < 4096 || i >= 8192) && b != 0 {
				t.Fatalf("octet %d outside the registered region changed", i)
			}
		}
	})
}
