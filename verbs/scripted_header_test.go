package verbs

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/goiwarp/iwarp/ddp"
	"github.com/goiwarp/iwarp/rdmap"
)

// Bad opcodes and versions in DDP and RDMAP headers, from the scripted raw
// peer of scripted_test.go.

// Opcodes: RFC 5040 section 7.2 "The RDMA OpCode MUST be valid" -> RDMAP
// remote operation error 0x06 "Unexpected OpCode" (section 4.8). RFC 5040
// Figure 4 fixes the T flag of each message, so a known opcode in the wrong
// buffer model is unexpected too; so are the RFC 7306 opcodes 8..11 on a
// stream that did not enable the extensions. Figure 10 says the DDP header
// goes back "if possible"; it is intact here, so M and D are set (siw leaves
// them out for opcode and version errors).
func TestScriptedOpcodeErrors(t *testing.T) {
	checkRoutines(t) // once for all subtests: the check costs 0.4 s
	type tc struct {
		name string
		u    []byte
	}
	var cases []tc
	for _, op := range []rdmap.Opcode{8, 9, 10, 11, 12, 15} {
		cases = append(cases, tc{fmt.Sprintf("untagged opcode %d", op), sendULPDU(op, 0, rdmap.QNSend, 1, 0, true, payload16)})
	}
	cases = append(cases,
		tc{"untagged RDMA Write", sendULPDU(rdmap.OpWrite, 0, rdmap.QNSend, 1, 0, true, payload16)},
		tc{"untagged Read Response", sendULPDU(rdmap.OpReadResponse, 0, rdmap.QNSend, 1, 0, true, payload16)})
	for _, op := range []rdmap.Opcode{rdmap.OpReadRequest, rdmap.OpSend, rdmap.OpSendInvalidate, rdmap.OpSendSE,
		rdmap.OpSendSEInvalidate, rdmap.OpTerminate, 8, 11, 15} {
		u := append(ddp.AppendTagged(nil, true, rdmap.Ctrl(op), 0x12345678, 0x1000), payload16...)
		cases = append(cases, tc{fmt.Sprintf("tagged %v", op), u})
	}
	for _, k := range cases {
		t.Run(k.name, func(t *testing.T) {
			s := startScenario(t, scenarioOpts{recvs: 2})
			s.p.send(t, k.u)
			s.wantTerminate(t, rdmapTerm(rdmap.ETypeRemoteOperation, rdmap.CodeUnexpectedOpcode, k.u))
		})
	}
}

// Versions. DDP: RFC 5041 section 4.1 "DV ... MUST be set to one"; section
// 7.2 has a version code per buffer model: 0x04 tagged, 0x06 untagged.
// RDMAP: RFC 5040 section 7.2 "The RDMA Version MUST be valid" -> remote
// operation error 0x05. The headers go back with M and D: their layout is
// known from the T flag (siw omits them, "packet layout unknown").
func TestScriptedVersionErrors(t *testing.T) {
	checkRoutines(t) // once for all subtests: the check costs 0.4 s
	withCtrl := func(u []byte, ddpCtrl, rdmapCtrl byte) []byte {
		u = bytes.Clone(u)
		u[0], u[1] = ddpCtrl, rdmapCtrl
		return u
	}
	send := sendULPDU(rdmap.OpSend, 0, rdmap.QNSend, 1, 0, true, payload16)
	write := writeULPDU(0x12345678, 0x1000, payload16)
	type tc struct {
		name string
		u    []byte
		want func(u []byte) rdmap.Terminate
	}
	ddpUT := func(u []byte) rdmap.Terminate { return ddpTerm(ddp.ETypeUntagged, ddp.CodeUntaggedVersion, u) }
	ddpT := func(u []byte) rdmap.Terminate { return ddpTerm(ddp.ETypeTagged, ddp.CodeTaggedVersion, u) }
	rv := func(u []byte) rdmap.Terminate {
		return rdmapTerm(rdmap.ETypeRemoteOperation, rdmap.CodeInvalidVersion, u)
	}
	cases := []tc{
		{"untagged DV 0", withCtrl(send, 0x40, 0x43), ddpUT},
		{"untagged DV 2", withCtrl(send, 0x42, 0x43), ddpUT},
		{"tagged DV 0", withCtrl(write, 0xc0, 0x40), ddpT},
		{"tagged DV 3", withCtrl(write, 0xc3, 0x40), ddpT},
		// A bad DV wins over a bad RV: DDP looks first.
		{"DV and RV both bad", withCtrl(send, 0x42, 0x83), ddpUT},
		{"Send RV 0", withCtrl(send, 0x41, 0x03), rv},
		{"Send RV 2", withCtrl(send, 0x41, 0x83), rv},
		{"Write RV 3", withCtrl(write, 0xc1, 0xc0), rv},
	}
	for _, k := range cases {
		t.Run(k.name, func(t *testing.T) {
			s := startScenario(t, scenarioOpts{recvs: 2})
			s.p.send(t, k.u)
			s.wantTerminate(t, k.want(k.u))
		})
	}
}
