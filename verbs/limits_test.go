package verbs

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Every device limit SECURITY.md lists is reached here and refused with a
// typed error, and what fits just under it still works.
func TestDeviceLimits(t *testing.T) {
	checkRoutines(t)
	d := openDev(DeviceAttr{MaxQP: 2, MaxQPWR: 8, MaxMR: 3, MaxMRSize: 4096, MaxMRTotal: 6000, MaxCQE: 16, MaxPrivData: 32})
	pd := d.AllocPD()

	t.Run("MaxCQE", func(t *testing.T) {
		_, err := d.CreateCQ(16)
		require.NoError(t, err)
		_, err = d.CreateCQ(17)
		require.ErrorIs(t, err, ErrInvalidArg)
	})
	cq, err := d.CreateCQ(16)
	require.NoError(t, err)
	t.Run("MaxQPWR", func(t *testing.T) {
		_, err := pd.CreateQP(QPConfig{SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 9, MaxRecvWR: 1}})
		require.ErrorIs(t, err, ErrInvalidArg)
		_, err = pd.CreateQP(QPConfig{SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 1, MaxRecvWR: 9}})
		require.ErrorIs(t, err, ErrInvalidArg)
	})
	t.Run("MaxQP", func(t *testing.T) {
		var qps []*QP
		for range 2 {
			qp, err := pd.CreateQP(QPConfig{SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 8, MaxRecvWR: 8}})
			require.NoError(t, err)
			qps = append(qps, qp)
		}
		_, err := pd.CreateQP(QPConfig{SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 8, MaxRecvWR: 8}})
		require.ErrorIs(t, err, ErrResources)
		for _, qp := range qps {
			qp.Close()
		}
	})
	t.Run("MaxMRSize", func(t *testing.T) {
		_, err := pd.RegMR(make([]byte, 4097), LocalWrite)
		require.ErrorIs(t, err, ErrResources)
	})
	t.Run("MaxMRTotal", func(t *testing.T) {
		a, err := pd.RegMR(make([]byte, 4096), LocalWrite)
		require.NoError(t, err)
		_, err = pd.RegMR(make([]byte, 2000), LocalWrite)
		require.ErrorIs(t, err, ErrResources, "4096 + 2000 > 6000")
		b, err := pd.RegMR(make([]byte, 1904), LocalWrite)
		require.NoError(t, err, "4096 + 1904 = 6000")
		require.NoError(t, a.Dereg())
		require.NoError(t, b.Dereg())
	})
	t.Run("MaxMR", func(t *testing.T) {
		var mrs []*MR
		for range 3 {
			mr, err := pd.RegMR(make([]byte, 16), LocalWrite)
			require.NoError(t, err)
			mrs = append(mrs, mr)
		}
		_, err := pd.RegMR(make([]byte, 16), LocalWrite)
		require.ErrorIs(t, err, ErrResources)
		for _, mr := range mrs {
			require.NoError(t, mr.Dereg())
		}
		mr, err := pd.RegMR(make([]byte, 16), LocalWrite)
		require.NoError(t, err, "deregistration gives the slots back")
		mr.Dereg()
	})
	t.Run("MaxPrivData", func(t *testing.T) {
		qp, err := pd.CreateQP(QPConfig{SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 8, MaxRecvWR: 8}})
		require.NoError(t, err)
		defer qp.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		err = qp.Dial(ctx, "tcp", "127.0.0.1:1", ConnConfig{PrivateData: make([]byte, 33)})
		require.ErrorIs(t, err, ErrInvalidArg)
	})
}
