// Package algo is the EMPO² algorithm's maths in one room, pure Go (no cgo,
// no model, no environment): the mode draw, GRPO group advantages with the
// intrinsic bonus, low-probability masking and the clipped / dual-clip PPO
// surrogate's per-token coefficients with their validation. Everything else
// — playing rollouts (trainer/rollout), building sequences and running the
// loop (trainer), evaluating the graph and its gradient (cgo) — calls these
// functions and defines none of them again; cgo receives the surrogate as a
// function (cgo.Objective.Policy) and neither validates nor masks.
//
// EMPO² (arXiv 2602.23008, ICLR 2026; the reference code is the authors'
// verl recipe, microsoft/agent-lightning branch v0.x, contrib/). A training
// step, in the notation of the paper's §3:
//
//	mode:      u ~ U(0,1);  u < p·q → off-policy,  u < p → on-policy with
//	           tips, else on-policy (§3.3; DrawMode; the reference code's
//	           p = 0.25, q = 0.68, the paper's text p = ½, q = ⅓)
//	rollout:   a_t ~ π_θ(· | s_t, tips_t) with tips_t retrieved from the
//	           memory in the two memory modes (§3.2), else π_θ(· | s_t)
//	bonus:     b_t = coef / (n_t + 1), n_t tips retrieved at step t (§3.2;
//	           IntrinsicReward), memory rollouts only
//	advantage: A_it = (E_i − mean_g E + c_it) / (std_g E + ε),  E_i = s·score_i
//	           (GRPO, Shao et al. 2024 §4.1.2, "final reward as step reward";
//	           c_it the group-centred bonus, bounded below the score steps;
//	           GroupAdvantages)
//	ratio:     r_t = π_θ(a_t | s_t) / π_old(a_t | s_t, tips_t) — off-policy:
//	           the update's prompt has no tips, π_old's has them (§3.3)
//	mask:      a response with min_t log π_old(a_t) < δ (−5) is left out of
//	           the loss (§3.3, low-probability masking; LowProbMask, Masked)
//	loss:      ℓ_t = max(−A·r_t, −A·clip(r_t, 1−ε_low, 1+ε_high)), and for
//	           A < 0 min(ℓ_t, −c·A) (PPO, Schulman et al. 2017 eq. 7;
//	           dual clip, Ye et al. 2020 eq. 5; PPO.Token), ε_low 0.2,
//	           ε_high 0.3, c 10
//
// docs/training.md derives the objective's gradient; docs/memory.md the
// memory side.
package algo
