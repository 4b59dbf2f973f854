package rsocket

import (
	"encoding/binary"
	"fmt"
)

// The rsockets wire format, as librdmacm's rsocket.c (rdma-core) defines it.
const (
	// connVersion is rs_conn_data.version; rsocket.c refuses any other.
	connVersion = 1
	// Connection flags (rs_conn_data.flags): RS_CONN_FLAG_NET says the
	// sender is big-endian, RS_CONN_FLAG_IOMAP that it has an iomap
	// table after its target SGL (possibly of size 0).
	connFlagNet   = 1 << 0
	connFlagIOMap = 1 << 1
	// connDataLen is sizeof(struct rs_conn_data): version, flags,
	// credits, 3 reserved octets, target_iomap_size, then two rs_sge
	// (target_sgl, data_buf), all big-endian.
	connDataLen = 40
	// sgeLen is sizeof(struct rs_sge): addr (8), key (4), length (4). In
	// SGL updates it is in the receiver's byte order (little-endian here).
	sgeLen = 16
	// sglSize is RS_SGL_SIZE: entries in a target SGL.
	sglSize = 2
	// msgLen is RS_MSG_SIZE: over iWARP (RS_OPT_MSG_SEND) every message
	// is a 4-octet Send in the sender's byte order.
	msgLen = 4
	// maxCtrl is RS_QP_CTRL_SIZE: control WRs a side has outstanding.
	maxCtrl = 4
	// maxMsgData is the largest value bits 28..0 of a message hold.
	maxMsgData = 1<<29 - 1
)

// Message operations, bits 31..29 of a message (RS_OP_*).
const (
	opData      = 0 // bits 28..0: octets written into the ring
	opDataMore  = 1 // reserved
	opWrite     = 2 // riowrite's direct writes: never sent as a message
	opDRAMore   = 3 // reserved
	opSGL       = 4 // bits 28..0: the peer's new credit limit (a sequence number)
	opRsvd      = 5
	opIOMapSGL  = 6 // bits 15..0: an iomap entry the peer wrote
	opCtrl      = 7 // bits 28..0: ctrlDisconnect, ctrlKeepalive, ctrlShutdown
	opShift     = 29
	msgDataMask = 1<<29 - 1
)

// Control messages (RS_CTRL_*).
const (
	ctrlDisconnect = 0
	ctrlKeepalive  = 1
	ctrlShutdown   = 2
)

func msgSet(op, data uint32) uint32 { return op<<opShift | data }
func msgOp(m uint32) uint32         { return m >> opShift }
func msgData(m uint32) uint32       { return m & msgDataMask }

// sge is struct rs_sge: a buffer of the peer's that we may RDMA Write.
type sge struct {
	addr uint64
	key  uint32
	len  uint32
}

// putLE writes s as an SGL update: in the receiver's byte order, which is
// little-endian for every peer this package accepts.
func (s sge) putLE(b []byte) {
	binary.LittleEndian.PutUint64(b[0:], s.addr)
	binary.LittleEndian.PutUint32(b[8:], s.key)
	binary.LittleEndian.PutUint32(b[12:], s.len)
}

func getSGELE(b []byte) sge {
	return sge{addr: binary.LittleEndian.Uint64(b[0:]), key: binary.LittleEndian.Uint32(b[8:]), len: binary.LittleEndian.Uint32(b[12:])}
}

// connData is struct rs_conn_data, the private data of the connection
// request and of its reply.
type connData struct {
	version   uint8
	flags     uint8
	credits   uint16 // receive credits granted: the peer may send this many data messages
	iomapSize uint8  // target_iomap_size, as rs_value_to_scale(n, 8)
	targetSGL sge    // where the peer writes SGL updates; len counts entries
	dataBuf   sge    // the first part of the ring the peer may write
}

func (c connData) marshal() []byte {
	b := make([]byte, connDataLen)
	b[0] = c.version
	b[1] = c.flags
	binary.BigEndian.PutUint16(b[2:], c.credits)
	b[7] = c.iomapSize
	putSGEBE(b[8:], c.targetSGL)
	putSGEBE(b[24:], c.dataBuf)
	return b
}

func putSGEBE(b []byte, s sge) {
	binary.BigEndian.PutUint64(b[0:], s.addr)
	binary.BigEndian.PutUint32(b[8:], s.key)
	binary.BigEndian.PutUint32(b[12:], s.len)
}

func getSGEBE(b []byte) sge {
	return sge{addr: binary.BigEndian.Uint64(b[0:]), key: binary.BigEndian.Uint32(b[8:]), len: binary.BigEndian.Uint32(b[12:])}
}

// parseConnData reads and checks a peer's rs_conn_data.
func parseConnData(p []byte) (connData, error) {
	if len(p) < connDataLen {
		return connData{}, fmt.Errorf("%w: %d octets of private data, rs_conn_data needs %d", ErrProtocol, len(p), connDataLen)
	}
	c := connData{
		version:   p[0],
		flags:     p[1],
		credits:   binary.BigEndian.Uint16(p[2:]),
		iomapSize: p[7],
		targetSGL: getSGEBE(p[8:]),
		dataBuf:   getSGEBE(p[24:]),
	}
	switch {
	case c.version != connVersion:
		return c, fmt.Errorf("%w: rsockets version %d, want %d", ErrProtocol, c.version, connVersion)
	case c.flags&connFlagNet != 0:
		return c, ErrByteOrder
	case c.credits == 0:
		return c, fmt.Errorf("%w: no receive credits", ErrProtocol)
	case c.targetSGL.len == 0 || c.targetSGL.len > 1<<16:
		return c, fmt.Errorf("%w: target SGL of %d entries", ErrProtocol, c.targetSGL.len)
	case c.dataBuf.len == 0:
		return c, fmt.Errorf("%w: empty data buffer", ErrProtocol)
	}
	return c, nil
}
