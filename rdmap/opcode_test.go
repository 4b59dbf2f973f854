package rdmap

import (
	"fmt"
	"testing"

	"github.com/goiwarp/iwarp/ddp"
	"github.com/stretchr/testify/require"
)

func TestOpcodeTable(t *testing.T) {
	for _, tc := range []struct {
		op      Opcode
		name    string
		tagged  bool
		qn      uint32
		hdrLen  int
		rfc7306 bool
	}{
		{OpWrite, "RDMA Write", true, 0, 14, false},
		{OpReadRequest, "RDMA Read Request", false, 1, 46, false},
		{OpReadResponse, "RDMA Read Response", true, 0, 14, false},
		{OpSend, "Send", false, 0, 18, false},
		{OpSendInvalidate, "Send with Invalidate", false, 0, 18, false},
		{OpSendSE, "Send with Solicited Event", false, 0, 18, false},
		{OpSendSEInvalidate, "Send with Solicited Event and Invalidate", false, 0, 18, false},
		{OpTerminate, "Terminate", false, 2, 22, false},
		// RFC 7306 Figure 2: QN 0, 1, 3.
		{OpImmediateData, "Immediate Data", false, 0, 26, true},
		{OpImmediateDataSE, "Immediate Data with Solicited Event", false, 0, 26, true},
		{OpAtomicRequest, "Atomic Request", false, 1, 70, true},
		{OpAtomicResponse, "Atomic Response", false, 3, 30, true},
	} {
		info := tc.op.Info()
		require.True(t, info.Known, tc.name)
		require.Equal(t, tc.name, info.Name)
		require.Equal(t, tc.name, tc.op.String())
		require.Equal(t, tc.tagged, info.Tagged, tc.name)
		require.Equal(t, tc.qn, info.QN, tc.name)
		require.Equal(t, tc.hdrLen, info.HdrLen, tc.name)
		require.Equal(t, tc.rfc7306, info.RFC7306, tc.name)
	}
	for op := Opcode(12); op < 16; op++ {
		require.False(t, op.Info().Known)
		require.Equal(t, fmt.Sprintf("Opcode(%d)", op), op.String())
	}
	require.Equal(t, "Opcode(200)", Opcode(200).String())
	require.Equal(t, uint32(3), NumQueues(false))
	require.Equal(t, uint32(4), NumQueues(true))
}

func TestCtrl(t *testing.T) {
	require.Equal(t, byte(0x40), Ctrl(OpWrite))
	require.Equal(t, byte(0x41), Ctrl(OpReadRequest))
	require.Equal(t, byte(0x43), Ctrl(OpSend))
	require.Equal(t, byte(0x47), Ctrl(OpTerminate))
	require.Equal(t, byte(0x4a), Ctrl(OpAtomicRequest))
	require.Equal(t, byte(0x4b), Ctrl(OpAtomicResponse))
	require.EqualValues(t, 1, CtrlVersion(0x47))
	require.EqualValues(t, 3, CtrlVersion(0xc7))
	require.Equal(t, OpTerminate, CtrlOpcode(0xf7))
}

func TestCheckCtrl(t *testing.T) {
	for op := Opcode(0); op < 8; op++ {
		got, err := CheckCtrl(op.Info().Tagged, Ctrl(op), false)
		require.NoError(t, err, "%v", op)
		require.Equal(t, op, got)
	}
	// Reserved bits are ignored (RFC 5040 section 4.1).
	_, err := CheckCtrl(false, Ctrl(OpSend)|CtrlReservedMask, false)
	require.NoError(t, err)

	// RFC 7306 opcodes need the opt-in.
	for _, op := range []Opcode{OpImmediateData, OpImmediateDataSE, OpAtomicRequest, OpAtomicResponse} {
		_, err := CheckCtrl(false, Ctrl(op), false)
		require.ErrorIs(t, err, ErrUnexpectedOpcode, "%v", op)
		_, err = CheckCtrl(false, Ctrl(op), true)
		require.NoError(t, err, "%v", op)
	}
	for op := Opcode(12); op < 16; op++ {
		_, err := CheckCtrl(false, Ctrl(op), true)
		require.ErrorIs(t, err, ErrUnexpectedOpcode)
		require.Equal(t, Cause{LayerRDMAP, 2, 0x06}, CauseOf(err))
	}
	// Wrong buffer model for the opcode.
	_, err = CheckCtrl(true, Ctrl(OpSend), false)
	require.ErrorIs(t, err, ErrUnexpectedOpcode)
	_, err = CheckCtrl(false, Ctrl(OpWrite), false)
	require.ErrorIs(t, err, ErrUnexpectedOpcode)

	// Version: only RV = 01b.
	for _, rv := range []byte{0, 2, 3} {
		_, err := CheckCtrl(false, rv<<6|byte(OpSend), false)
		require.ErrorIs(t, err, ErrInvalidVersion)
		require.Equal(t, Cause{LayerRDMAP, 2, 0x05}, CauseOf(err))
	}
}

func TestQueueNumbersMatchDDP(t *testing.T) {
	require.NoError(t, ddp.CheckQN(QNTerminate, NumQueues(false)))
	require.Error(t, ddp.CheckQN(QNAtomicResponse, NumQueues(false)))
	require.NoError(t, ddp.CheckQN(QNAtomicResponse, NumQueues(true)))
}
