package target
