package rdmap

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/goiwarp/iwarp/ddp"
	"github.com/goiwarp/iwarp/mpa"
	"github.com/stretchr/testify/require"
)

func TestCauseOf(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want Cause
	}{
		{&mpa.Error{Code: mpa.CodeCRC}, Cause{LayerLLP, 0, 0x02}},
		{fmt.Errorf("rx: %w", &mpa.Error{Code: mpa.CodeMarker, Err: io.ErrUnexpectedEOF}), Cause{LayerLLP, 0, 0x03}},
		{mpa.ErrInsufficientIRD, Cause{LayerLLP, 0, 0x06}},
		{ddp.Errorf(ddp.ETypeTagged, ddp.CodeTOWrap, "x"), Cause{LayerDDP, 1, 0x03}},
		{fmt.Errorf("qp: %w", ddp.ErrMSNNoBuffer), Cause{LayerDDP, 2, 0x02}},
		{ErrAccessRights, Cause{LayerRDMAP, 1, 0x02}},
		{fmt.Errorf("read: %w", ErrCannotInvalidate), Cause{LayerRDMAP, 2, 0x09}},
		{&RemoteError{Terminate{Layer: LayerDDP, EType: 2, Code: 1}}, Cause{LayerDDP, 2, 1}},
		// Anything else: RDMAP local catastrophic, code 0x07.
		{io.EOF, Cause{LayerRDMAP, 0, 0x07}},
		{errors.New("internal"), Cause{LayerRDMAP, 0, 0x07}},
		{nil, Cause{LayerRDMAP, 0, 0x07}},
	} {
		require.Equal(t, tc.want, CauseOf(tc.err), "%v", tc.err)
	}
}

func TestCauseStrings(t *testing.T) {
	for _, tc := range []struct {
		c    Cause
		want string
	}{
		{Cause{LayerRDMAP, 0, 0x07}, "RDMAP local catastrophic error (code 0x07)"},
		{Cause{LayerRDMAP, 0, 0}, "RDMAP local catastrophic error"},
		{Cause{LayerRDMAP, 1, 0x00}, "RDMAP remote protection error: invalid STag"},
		{Cause{LayerRDMAP, 1, 0x03}, "RDMAP remote protection error: STag not associated with RDMAP stream"},
		{Cause{LayerRDMAP, 2, 0x06}, "RDMAP remote operation error: unexpected opcode"},
		{Cause{LayerRDMAP, 2, 0x07}, "RDMAP remote operation error: catastrophic error, localized to RDMAP stream"},
		{Cause{LayerRDMAP, 2, 0xff}, "RDMAP remote operation error: unspecified error"},
		{Cause{LayerRDMAP, 2, 0x42}, "RDMAP remote operation error (code 0x42)"},
		{Cause{LayerRDMAP, 7, 0x00}, "RDMAP error type 7 (code 0x00)"},
		{Cause{LayerRDMAP, 1, 0x05}, "RDMAP remote protection error (code 0x05)"},
		{Cause{LayerDDP, 2, 0x00}, "DDP untagged buffer error (code 0x00)"},
		{Cause{LayerDDP, 0, 0x03}, "DDP local catastrophic error (code 0x03)"},
		{Cause{LayerDDP, 0, 0}, "DDP local catastrophic error"},
		{Cause{LayerDDP, 1, 0x00}, "DDP tagged buffer error: invalid STag"},
		{Cause{LayerDDP, 2, 0x03}, "DDP untagged buffer error: invalid MSN - MSN range is not valid"},
		{Cause{LayerDDP, 2, 0x06}, "DDP untagged buffer error: invalid DDP version"},
		{Cause{LayerLLP, 0, 0x02}, "LLP MPA error: MPA CRC error"},
		{Cause{LayerLLP, 0, 0x07}, "LLP MPA error: no matching RTR option"},
		{Cause{LayerLLP, 3, 0x01}, "LLP error type 3 (code 0x01)"},
		{Cause{Layer(9), 1, 2}, "layer 9 error type 1 (code 0x02)"},
	} {
		require.Equal(t, tc.want, tc.c.String())
	}
}

func TestCauseValid(t *testing.T) {
	valid := []Cause{
		{LayerRDMAP, 0, 0x00}, {LayerRDMAP, 0, 0x99}, // any code for local catastrophic
		{LayerRDMAP, 1, 0x00}, {LayerRDMAP, 1, 0x04}, {LayerRDMAP, 1, 0x09}, {LayerRDMAP, 1, 0xff},
		{LayerRDMAP, 2, 0x05}, {LayerRDMAP, 2, 0x08}, {LayerRDMAP, 2, 0x09}, {LayerRDMAP, 2, 0xff},
		{LayerDDP, 0, 0}, {LayerDDP, 1, 0}, {LayerDDP, 1, 4}, {LayerDDP, 2, 1}, {LayerDDP, 2, 6},
		{LayerLLP, 0, 1}, {LayerLLP, 0, 7},
	}
	invalid := []Cause{
		{LayerRDMAP, 1, 0x05}, {LayerRDMAP, 1, 0x08}, {LayerRDMAP, 2, 0x00}, {LayerRDMAP, 2, 0x04},
		{LayerRDMAP, 2, 0x02}, {LayerRDMAP, 3, 0},
		{LayerDDP, 0, 1}, {LayerDDP, 1, 5}, {LayerDDP, 2, 0}, {LayerDDP, 2, 7}, {LayerDDP, 3, 0},
		{LayerLLP, 0, 0}, {LayerLLP, 0, 8}, {LayerLLP, 1, 1}, {3, 0, 0},
	}
	for _, c := range valid {
		require.True(t, c.Valid(), "%+v", c)
	}
	for _, c := range invalid {
		require.False(t, c.Valid(), "%+v", c)
	}
}

func TestErrorAndIs(t *testing.T) {
	err := Errorf(ETypeRemoteProtection, CodeBaseBounds, "source TO %#x", 0x10)
	require.EqualError(t, err, "rdmap: remote protection error: base or bounds violation: source TO 0x10")
	require.ErrorIs(t, fmt.Errorf("w: %w", err), ErrBaseBounds)
	require.NotErrorIs(t, err, ErrInvalidSTag)
	require.NotErrorIs(t, err, ddp.ErrBaseBounds, "same code, other layer")
	require.EqualError(t, ErrUnexpectedOpcode, "rdmap: remote operation error: unexpected opcode")
	require.Equal(t, "DDP", LayerDDP.String())
	require.Equal(t, "LLP", LayerLLP.String())
	require.Equal(t, "RDMAP", LayerRDMAP.String())
	require.Equal(t, "layer 4", Layer(4).String())
}
