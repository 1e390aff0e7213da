package cluster

// MoveLeaderRequest is the body of POST /v1/leader/move: the member to hand leadership to
// (its name or hex ID); empty, the voter furthest along.
type MoveLeaderRequest struct {
	To string `json:"to,omitempty"`
}

// MoveLeaderResponse is the answer of POST /v1/leader/move: who led, and who leads now.
type MoveLeaderResponse struct {
	From   string `json:"from"`
	Leader string `json:"leader"`
}
