package nvmeof

import "syscall"

// oDSync opens a file whose writes return once their data is durable.
const oDSync = syscall.O_DSYNC
