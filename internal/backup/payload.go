package backup

import (
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"
)

// PayloadBuffer compresses an object's payload in memory as it is written, for writers that
// know the header only after the data: a delta's last revision is known when its last event
// has arrived. It holds the payload compressed (a third to a half of the raw bytes on etcd's
// data, where a buffer of raw events held all of them), in chunks of fixed size (no copying
// and no doubling as it grows), and keeps one encoder for every object it buffers instead of
// a new one per object. Store it with WriteBufferedObject, then Reset it for the next object.
// Not safe for concurrent use.
type PayloadBuffer struct {
	kind     Kind
	chunks   chunkBuffer // the compressed payload
	enc      *zstd.Encoder
	raw      int64
	finished bool // the zstd frame is complete: no more writes until Reset
	err      error
}

// NewPayloadBuffer returns an empty buffer for the payload of an object of the given kind,
// compressed with zstd as ObjectWriter compresses it.
func NewPayloadBuffer(kind Kind) (*PayloadBuffer, error) {
	p := &PayloadBuffer{kind: kind}
	enc, err := newEncoder(&p.chunks, kind)
	if err != nil {
		return nil, err
	}
	p.enc = enc
	return p, nil
}

// Write adds raw payload bytes.
func (p *PayloadBuffer) Write(b []byte) (int, error) {
	if p.err != nil {
		return 0, p.err
	}
	if p.finished {
		return 0, errors.New("backup payload buffer: written after it was stored; Reset it first")
	}
	n, err := p.enc.Write(b)
	p.raw += int64(n)
	if err != nil {
		p.err = fmt.Errorf("compress backup payload: %w", err)
	}
	return n, p.err
}

// Raw is the number of payload bytes written since the last Reset, before compression.
func (p *PayloadBuffer) Raw() int64 { return p.raw }

// finish ends the zstd frame; the buffer then holds the whole payload. It may be called
// again (a retried store write) and does nothing then.
func (p *PayloadBuffer) finish() error {
	if p.err != nil || p.finished {
		return p.err
	}
	if err := p.enc.Close(); err != nil {
		p.err = fmt.Errorf("finish zstd stream: %w", err)
		return p.err
	}
	p.finished = true
	return nil
}

// Reset empties the buffer for the next object. It keeps up to maxKeep bytes of its memory
// for reuse and gives back the rest (what a burst needed).
func (p *PayloadBuffer) Reset(maxKeep int) {
	p.chunks.reset(maxKeep)
	p.enc.Reset(&p.chunks)
	p.raw, p.finished, p.err = 0, false, nil
}

// chunkBuffer is an append-only buffer of fixed-size chunks.
type chunkBuffer struct {
	chunks [][]byte // full chunks, then the one being filled
	spare  [][]byte // emptied chunks kept for reuse
}

const payloadChunk = 1 << 20

func (c *chunkBuffer) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if len(c.chunks) == 0 || len(c.chunks[len(c.chunks)-1]) == payloadChunk {
			var b []byte
			if k := len(c.spare); k > 0 {
				b, c.spare = c.spare[k-1][:0], c.spare[:k-1]
			} else {
				b = make([]byte, 0, payloadChunk)
			}
			c.chunks = append(c.chunks, b)
		}
		last := &c.chunks[len(c.chunks)-1]
		m := min(len(p), payloadChunk-len(*last))
		*last = append(*last, p[:m]...)
		p = p[m:]
	}
	return n, nil
}

// writeTo writes the buffer's bytes to w, chunk by chunk.
func (c *chunkBuffer) writeTo(w io.Writer) error {
	for _, b := range c.chunks {
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

func (c *chunkBuffer) reset(maxKeep int) {
	for i, b := range c.chunks {
		if (len(c.spare)+1)*payloadChunk <= maxKeep {
			c.spare = append(c.spare, b[:0])
		}
		c.chunks[i] = nil
	}
	c.chunks = c.chunks[:0]
}
