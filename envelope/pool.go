package envelope

// blockLen is the number of envelopes in a pool block: 8 (next) + 2730·(8+4)
// = 32768 bytes, exactly Go's largest small size class, so a block wastes
// nothing to rounding and costs 12.0 bytes an envelope.
const blockLen = 2730

// maxFreeBlocks is how many drained blocks a Pool keeps for reuse. A FIFO in
// steady state drains a head block about when it fills a tail block, so one
// spare makes steady state allocation-free; keeping more would only hold
// memory in an idle server.
const maxFreeBlocks = 1

// poolBlock keeps ids and amounts in separate arrays so an envelope takes 12
// bytes instead of the 16 of a padded {uint64, uint32} struct. next comes
// first so the garbage collector scans one word of the block, not 32 KiB.
type poolBlock struct {
	next    *poolBlock
	ids     [blockLen]uint64
	amounts [blockLen]uint32
}

// Pool is a SET's FIFO of shake envelopes waiting to be handed out: a linked
// queue of 32 KiB blocks, read at the head and written at the tail. Memory
// grows with what is waiting (10,000,000 envelopes take about 120 MB) and
// drained blocks go back to the garbage collector beyond one spare, so an
// empty pool holds at most two blocks.
//
// Rejected: a growable ring slice. Growing copies the whole pool and doubles
// it, so the peak is 3× the contents and a pause that scales with the pool.
//
// A Pool is owned by the shake stage's goroutine and is not safe for
// concurrent use. The zero value is an empty pool that has allocated nothing.
type Pool struct {
	head, tail *poolBlock // head == nil until the first Push
	r, w       int        // next read index in head, next write index in tail
	n          int
	amount     uint64
	free       *poolBlock // drained blocks for reuse, linked by next
	nfree      int
}

// Len returns the number of envelopes waiting.
func (p *Pool) Len() int { return p.n }

// Amount returns the sum of the amounts waiting, in fen.
func (p *Pool) Amount() uint64 { return p.amount }

// Push appends an envelope at the tail.
func (p *Pool) Push(id uint64, amount uint32) {
	if p.tail == nil || p.w == blockLen {
		p.grow()
	}
	p.tail.ids[p.w] = id
	p.tail.amounts[p.w] = amount
	p.w++
	p.n++
	p.amount += uint64(amount)
}

// PushBatch appends ids[i] with amounts[i] in order. The slices must have the
// same length; anything else is a caller bug and panics.
func (p *Pool) PushBatch(ids []uint64, amounts []uint32) {
	if len(ids) != len(amounts) {
		panic("BUG: envelope: PushBatch with len(ids) != len(amounts)")
	}
	for len(ids) > 0 {
		if p.tail == nil || p.w == blockLen {
			p.grow()
		}
		c := copy(p.tail.ids[p.w:], ids)
		copy(p.tail.amounts[p.w:], amounts[:c])
		for _, a := range amounts[:c] {
			p.amount += uint64(a)
		}
		p.w += c
		p.n += c
		ids, amounts = ids[c:], amounts[c:]
	}
}

// Pop removes and returns the envelope at the head; ok is false when the pool
// is empty.
func (p *Pool) Pop() (id uint64, amount uint32, ok bool) {
	if p.n == 0 {
		return 0, 0, false
	}
	if p.r == blockLen { // head drained; n > 0 means a next block exists
		b := p.head
		p.head, p.r = b.next, 0
		p.release(b)
	}
	id, amount = p.head.ids[p.r], p.head.amounts[p.r]
	p.r++
	p.n--
	p.amount -= uint64(amount)
	if p.n == 0 {
		// Empty means head == tail (a tail block is only linked on a Push
		// into it): restart the block from the top instead of walking on.
		p.r, p.w = 0, 0
	}
	return id, amount, true
}

// grow links a fresh block at the tail.
// Each calls fn for every envelope in the pool, the next to pop first.
func (p *Pool) Each(fn func(id uint64, amount uint32)) {
	r := p.r
	for b := p.head; b != nil && p.n > 0; b = b.next {
		end := blockLen
		if b == p.tail {
			end = p.w
		}
		for i := r; i < end; i++ {
			fn(b.ids[i], b.amounts[i])
		}
		r = 0
	}
}

func (p *Pool) grow() {
	b := p.free
	if b != nil {
		p.free, b.next = b.next, nil
		p.nfree--
	} else {
		b = new(poolBlock)
	}
	if p.tail == nil {
		p.head = b
	} else {
		p.tail.next = b
	}
	p.tail, p.w = b, 0
}

// release keeps a drained block as a spare or leaves it to the collector.
// Stale ids and amounts stay in it; they hold no pointers and are overwritten
// before they are read again.
func (p *Pool) release(b *poolBlock) {
	if p.nfree >= maxFreeBlocks {
		b.next = nil
		return
	}
	b.next = p.free
	p.free = b
	p.nfree++
}
