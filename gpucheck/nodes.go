package gpucheck

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/empo2/empo2/cgo"
)

// Node-by-node comparison of two engines (check train --compare-nodes).
//
// The reference (CPU) and the engine under test compute the same graph —
// same batch, same LoRA weights, same options, hence the same nodes in the
// same order — twice: in one go, as every normal call does, and one node at
// a time with every node's output copied to the host (cgo.Model.Capture).
// The node-by-node outputs are compared node by node; the first node beyond
// the tolerance is where the engines part (every node before it agrees, so
// its op, or the data it reads, is wrong on the device). Computing node by
// node also switches off what a device does across consecutive nodes
// within one compute (ggml-cuda's op fusion, CUDA graphs): when the
// node-by-node log-probs agree and the one-go log-probs do not, that is
// the culprit. The training graph is compared the same way with fixed
// coefficients (the same for both engines, so that the backward's inputs
// do not depend on the forward's differences beyond the activations).

// NodeDiff is one node of the engine under test against the same node of
// the reference.
type NodeDiff struct {
	Index    int       `json:"index"`
	Name     string    `json:"name,omitempty"`
	Op       string    `json:"op"`
	Srcs     []string  `json:"srcs,omitempty"`
	Shape    [4]int64  `json:"shape"`
	Backend  string    `json:"backend"` // where the engine under test computed it
	Backward bool      `json:"backward,omitempty"`
	MaxAbs   jsonFloat `json:"max_abs"`
	Rel      jsonFloat `json:"rel"` // ‖Δ‖₂/‖ref‖₂ (‖Δ‖₂ when ref is 0; +Inf for NaN/Inf)
	RefNorm  float64   `json:"ref_norm"`
}

// Label is how a node is named in one line: its name, else op(sources).
func (d NodeDiff) Label() string {
	s := fmt.Sprintf("#%d %s", d.Index, d.Op)
	if d.Name != "" {
		s += " " + d.Name
	}
	if len(d.Srcs) > 0 {
		s += "(" + strings.Join(d.Srcs, ", ") + ")"
	}
	return s + " [" + d.Backend + "]"
}

// NodeComparison is one graph compared node by node.
type NodeComparison struct {
	Graph    string  `json:"graph"` // "forward" or "train"
	Tol      float64 `json:"tol"`   // per-node ‖Δ‖/‖ref‖ bound
	LogpTol  float64 `json:"logprob_tol"`
	GradTol  float64 `json:"grad_tol"`
	Nodes    int     `json:"nodes"`    // in the graph
	Compared int     `json:"compared"` // with values on both sides
	// Structure: the first node whose op or shape differ (the two graphs
	// are not the same; nothing after it is compared).
	Structure string    `json:"structure_mismatch,omitempty"`
	First     *NodeDiff `json:"first_beyond_tol,omitempty"`
	Worst     *NodeDiff `json:"worst,omitempty"`
	// max |Δ log-prob| against the reference: both computed in one go, both
	// node by node, and the engine under test's two ways against each other
	LogpWhole      jsonFloat `json:"logprob_max_abs_whole"`
	LogpNodes      jsonFloat `json:"logprob_max_abs_nodes"`
	LogpWholeNodes jsonFloat `json:"logprob_max_abs_device_whole_vs_nodes"`
	// training graph: worst ‖Δg‖/‖g‖ of the LoRA gradients, both ways
	GradWhole *jsonFloat `json:"grad_worst_rel_whole,omitempty"`
	GradNodes *jsonFloat `json:"grad_worst_rel_nodes,omitempty"`
	Verdict   string     `json:"verdict"` // the one-line summary
	List      []NodeDiff `json:"node_list"`
}

// NodeReport is --compare-nodes for one engine under test.
type NodeReport struct {
	Forward *NodeComparison `json:"forward"`
	Train   *NodeComparison `json:"train"`
}

// fixedCoef is a training step's coefficient function that ignores the
// forward's outputs: c_logp, c_ent drawn once from seed (scale 1/M, both
// signs), the same for every engine.
func fixedCoef(seed int64, rows int) func(logp, ent, cLogp, cEnt []float32) error {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x6e6f646573))
	cl, ce := make([]float32, rows), make([]float32, rows)
	for j := range cl {
		cl[j] = float32((2*rng.Float64() - 1) / float64(rows))
		ce[j] = float32(0.01 * (2*rng.Float64() - 1) / float64(rows))
	}
	return func(logp, ent, cLogp, cEnt []float32) error {
		if len(cLogp) != rows {
			return fmt.Errorf("%w: %d rows, coefficients for %d", ErrConfig, len(cLogp), rows)
		}
		copy(cLogp, cl)
		copy(cEnt, ce)
		return nil
	}
}

// engineRun is one engine's graph both ways.
type engineRun struct {
	whole, nodes   *cgo.Capture
	gWhole, gNodes [][]float32
}

func runBothWays(m *cgo.Model, seqs [][]int32, coef func(logp, ent, cLogp, cEnt []float32) error) (*engineRun, error) {
	var r engineRun
	for _, nodes := range []bool{false, true} {
		if coef != nil {
			if err := m.ZeroGrads(); err != nil {
				return nil, err
			}
		}
		c, err := m.Capture(seqs, cgo.CaptureConfig{Coef: coef, Nodes: nodes})
		if err != nil {
			return nil, err
		}
		var g [][]float32
		if coef != nil {
			if g, err = m.Grads(); err != nil {
				return nil, err
			}
		}
		if nodes {
			r.nodes, r.gNodes = c, g
		} else {
			r.whole, r.gWhole = c, g
		}
	}
	if coef != nil {
		if err := m.ZeroGrads(); err != nil {
			return nil, err
		}
	}
	return &r, nil
}

func maxAbsAll(a, b []float32) jsonFloat {
	d, same := maxAbsDiff(a, b)
	if !same {
		d = math.Inf(1)
	}
	return jsonFloat(d)
}

func worstGradRel(ref, got [][]float32) jsonFloat {
	worst := 0.0
	for i := range ref {
		var g []float32
		if i < len(got) {
			g = got[i]
		}
		rel, _ := relDiff(ref[i], g)
		worst = math.Max(worst, rel)
	}
	return jsonFloat(worst)
}

// CompareConfig configures CompareNodes.
type CompareConfig struct {
	// Train compares the training graph (a training step with fixed
	// coefficients drawn from Seed; gradients zeroed before and after)
	// instead of the forward graph.
	Train bool
	Seed  int64
	// Tol bounds each node's ‖Δ‖/‖ref‖; LogpTol and GradTol the log-probs
	// and LoRA gradients (as TrainConfig's), for the verdict on the one-go
	// compute.
	Tol, LogpTol, GradTol float64
}

// CompareNodes computes seqs' forward or training graph on ref and dev, in
// one go and node by node, and compares them.
func CompareNodes(ref, dev *cgo.Model, seqs [][]int32, cfg CompareConfig) (*NodeComparison, error) {
	var coef func(logp, ent, cLogp, cEnt []float32) error
	graph := "forward"
	if cfg.Train {
		rows := 0
		for _, s := range seqs {
			rows += len(s) - 1
		}
		coef, graph = fixedCoef(cfg.Seed, rows), "train"
	}
	r, err := runBothWays(ref, seqs, coef)
	if err != nil {
		return nil, fmt.Errorf("reference: %w", err)
	}
	d, err := runBothWays(dev, seqs, coef)
	if err != nil {
		return nil, fmt.Errorf("engine under test: %w", err)
	}
	c := &NodeComparison{Graph: graph, Tol: cfg.Tol, LogpTol: cfg.LogpTol, GradTol: cfg.GradTol, Nodes: len(d.nodes.Nodes),
		LogpWhole: maxAbsAll(r.whole.Logp, d.whole.Logp), LogpNodes: maxAbsAll(r.nodes.Logp, d.nodes.Logp),
		LogpWholeNodes: maxAbsAll(d.whole.Logp, d.nodes.Logp), List: []NodeDiff{}}
	if cfg.Train {
		gw, gn := worstGradRel(r.gWhole, d.gWhole), worstGradRel(r.gNodes, d.gNodes)
		c.GradWhole, c.GradNodes = &gw, &gn
	}
	rn, dn := r.nodes.Nodes, d.nodes.Nodes
	first, worst := -1, -1
	for i := range max(len(rn), len(dn)) {
		if i >= len(rn) || i >= len(dn) || rn[i].Op != dn[i].Op || rn[i].Shape != dn[i].Shape || rn[i].Index != dn[i].Index {
			desc := func(n []cgo.NodeOutput) string {
				if i >= len(n) {
					return "none"
				}
				return fmt.Sprintf("%s %v", n[i].Op, n[i].Shape)
			}
			c.Structure = fmt.Sprintf("node %d: reference %s, engine under test %s (graphs of %d and %d nodes)", i, desc(rn), desc(dn), len(rn), len(dn))
			break
		}
		if rn[i].Data == nil || dn[i].Data == nil {
			continue
		}
		nd := NodeDiff{Index: dn[i].Index, Name: dn[i].Name, Op: dn[i].Op, Srcs: dn[i].Srcs, Shape: dn[i].Shape,
			Backend: dn[i].Backend, Backward: dn[i].Backward, MaxAbs: maxAbsAll(rn[i].Data, dn[i].Data)}
		rel, norm := relDiff(rn[i].Data, dn[i].Data)
		nd.Rel, nd.RefNorm = jsonFloat(rel), norm
		c.List = append(c.List, nd)
		k := len(c.List) - 1
		if first < 0 && !(rel <= cfg.Tol) { // NaN and Inf are beyond any tolerance
			first = k
		}
		if worst < 0 || rel > float64(c.List[worst].Rel) {
			worst = k
		}
	}
	c.Compared = len(c.List)
	if first >= 0 {
		f := c.List[first]
		c.First = &f
	}
	if worst >= 0 {
		w := c.List[worst]
		c.Worst = &w
	}
	c.Verdict = c.verdict()
	return c, nil
}

func (c *NodeComparison) verdict() string {
	logp := fmt.Sprintf("max |Δ log-prob| node by node %.3g, in one go %.3g", float64(c.LogpNodes), float64(c.LogpWhole))
	gradsFail := false
	if c.GradWhole != nil && c.GradNodes != nil {
		logp += fmt.Sprintf("; LoRA gradients worst ‖Δg‖/‖g‖ node by node %.3g, in one go %.3g", float64(*c.GradNodes), float64(*c.GradWhole))
		gradsFail = float64(*c.GradWhole) > c.GradTol && float64(*c.GradNodes) <= c.GradTol
	}
	switch {
	case c.Structure != "":
		return fmt.Sprintf("%s graph: the two graphs differ at %s; %s", c.Graph, c.Structure, logp)
	case c.Compared == 0:
		return fmt.Sprintf("%s graph: no node has values on both sides; %s", c.Graph, logp)
	case c.First != nil:
		return fmt.Sprintf("%s graph: first node beyond ‖Δ‖/‖ref‖ %g: %s rel %.3g max|Δ| %.3g (%d of %d nodes compared, all before it within); %s",
			c.Graph, c.Tol, c.First.Label(), float64(c.First.Rel), float64(c.First.MaxAbs), c.Compared, c.Nodes, logp)
	case float64(c.LogpWhole) > c.LogpTol && float64(c.LogpNodes) <= c.LogpTol || gradsFail:
		return fmt.Sprintf("%s graph: every node agrees node by node (worst rel %.3g at %s) but the one-go compute does not: op fusion or graph capture across nodes; %s",
			c.Graph, float64(c.Worst.Rel), c.Worst.Label(), logp)
	default:
		return fmt.Sprintf("%s graph: every node within %g (worst rel %.3g at %s); %s", c.Graph, c.Tol, float64(c.Worst.Rel), c.Worst.Label(), logp)
	}
}
