package ring

// NewAt is New with the first sequence at start, so tests can begin near a
// slot wrap-around or far into the sequence space.
func NewAt[T any](o Options, start int64) (*Ring[T], error) {
	o.start = start
	return New[T](o)
}
