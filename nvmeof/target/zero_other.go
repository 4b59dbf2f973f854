//go:build !linux

package target

import (
	"errors"
	"os"
)

func fileZero(*os.File, int64, int64, bool) error { return errors.ErrUnsupported }
