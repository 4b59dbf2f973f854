package rmem

// A call is on two intrusive lists of its Buffer: the calls in progress
// (active) and those waiting for a slot (queue). Both are under Buffer.mu.
const (
	linkQueue = iota
	linkActive
)

type links struct{ prev, next *call }

// list is a doubly linked list of calls through their links[which].
type list struct {
	head, tail *call
	n          int
	which      int
}

func (l *list) push(c *call) {
	k := &c.links[l.which]
	k.prev, k.next = l.tail, nil
	if l.tail != nil {
		l.tail.links[l.which].next = c
	} else {
		l.head = c
	}
	l.tail = c
	l.n++
}

func (l *list) remove(c *call) {
	k := &c.links[l.which]
	if k.prev != nil {
		k.prev.links[l.which].next = k.next
	} else {
		l.head = k.next
	}
	if k.next != nil {
		k.next.links[l.which].prev = k.prev
	} else {
		l.tail = k.prev
	}
	k.prev, k.next = nil, nil
	l.n--
}
