// Package mpa implements Marker PDU Aligned framing for TCP (RFC 5044) with the
// enhanced connection establishment of RFC 6581.
//
// It has two halves. The start-up half encodes and parses the MPA Request and
// Reply frames (key, M/C/R/H flags, revision, private data, and the rev-2
// IRD/ORD word with its peer-to-peer and RTR bits), and reads exactly one frame
// from a stream, never a byte past it. The full-operation half frames ULPDUs
// into FPDUs (length, pad, CRC32c, and a marker every 512 octets of the stream
// in each direction that negotiated them): Writer builds gather lists for
// writev, Reader strips markers, checks the CRC and lets the caller place a
// payload straight into its own memory.
//
// Errors that the RFCs report in a Terminate message carry their LLP error
// code (type *Error).
package mpa
