// Package ddp implements the Direct Data Placement protocol over reliable
// transports (RFC 5041): the tagged and untagged segment headers and the
// receive-side rules of RFC 5041 section 7.1 with their error numbers
// (section 7.2).
//
// Headers are views over byte slices (Tagged, Untagged): Parse checks the
// control octet and the length once, then the getters read fields in place.
// Encoders append to a caller's buffer (AppendTagged, AppendUntagged). Nothing
// here allocates unless it returns an error.
//
// The untagged checks (CheckQN, CheckMSN, CheckBuffer, CheckMO, CheckMsgLen)
// are made for a Data Sink that reads its stream in order, as a queue pair of
// package verbs does, on the header views it has read. The tagged checks of
// section 7.1 (STag valid and associated with the stream, TO and TO+length
// within the buffer, no wrap) need the memory registry, so a queue pair makes
// them with its device; this package supplies their error numbers.
//
// DDP leaves the RsvdULP octets to its upper layer; RDMAP (package rdmap) puts
// its control octet in the first one (ULPCtrl) and the Invalidate STag in the
// untagged header's other four (ULPWord).
package ddp
