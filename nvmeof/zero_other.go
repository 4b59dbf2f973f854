//go:build !linux

package nvmeof

import (
	"errors"
	"os"
)

func fileZero(*os.File, int64, int64, bool) error { return errors.ErrUnsupported }
