#!/usr/bin/env python3
"""Issue 28's open point, modelled before building: can partial broadcast beat full broadcast's
time to target at P = 256 if what travels is an aggregated, re-compressed sum along a tree?

Softmax regression, J = D = 128 classes and features, 24,000 samples drawn from a linear
teacher with Gumbel noise (numpy seed 0), P peers with K = 16 samples a clock each, plain SGD
(the step is lr times the mean gradient of all P·K samples, as full broadcast's).

  full   every replica applies every peer's batch each clock (full broadcast);
  tree   one up-tree (a balanced Q-ary tree toward peer 0) and the same tree down: every
         clock a peer sends its parent C_R(E + own batch + its children's messages of the
         clock before), keeping the rest in E (error feedback: nothing is lost, only
         delayed); peer 0 compresses the sum to rank Rd (error feedback too) and the result
         travels down the tree verbatim, one hop a clock, so every replica applies the same
         updates (identical replicas, H clocks apart). C_R: one warm-started power iteration
         (PowerSGD), as sfb_core::gossip's. Bytes per peer per clock: R pairs up, plus
         Rd pairs to each child for the ~P/Q inner peers.

Prints the clock at which the held-out objective first reaches the target (full broadcast's
objective at clock 30, 2.676 here), the minimum, the final value and the rise after it.

Usage: scripts/research/aggregated_relay.py P LR full CLOCKS
       scripts/research/aggregated_relay.py P LR tree CLOCKS Q R RD
Measured (P = 256, 480 clocks; the simulated clock of partial broadcast at Q = 10 costs
1/16 of full broadcast's, so 480 clocks is full broadcast's time to target, 0.103 s):
  full lr 8:                 target at 30, min 2.592, rises to 2.737 by clock 300
  tree Q=10 R=4  Rd=16 lr 2: target at 120, min 2.580, final 2.638
  tree Q=10 R=8  Rd=16 lr 2: target at 110, min 2.568, final 2.620
  tree Q=10 R=8  Rd=16 lr 4: target at 70,  min 2.607, final 2.731
  tree Q=10 R=4  Rd=16 lr 4: never (min 2.755)
  tree Q=3  R=4  Rd=16 lr 1: target at 220, min 2.562, final 2.567
  tree Q=10 R=Rd=128 (no compression) lr 8: target at ~40, as full broadcast
  tree Q=10 R=4 Rd=16 lr 8, or Q=3 at lr 8: rises from clock ~50 and diverges (4.86, 8.91)
So the aggregated tree reaches the target in a quarter to a half of the budget, but only
with a step 2-4 times smaller than full broadcast's: the error-feedback residuals are stale
mass, and at full broadcast's step they oscillate. Not built in sfb yet.
"""
import sys
import numpy as np

rng = np.random.default_rng(0)
J = D = 128; N = 24000; K = 16
P = int(sys.argv[1]); LR = float(sys.argv[2]); mode = sys.argv[3]; clocks = int(sys.argv[4])
Wt = rng.normal(size=(J, D)) / np.sqrt(D) * 3
def draw(n):
    X = rng.normal(size=(n, D)); return X, (X @ Wt.T + rng.gumbel(size=(n, J))).argmax(1)
Xtr, ytr = draw(N); Xte, yte = draw(2000)
shards = np.array_split(rng.permutation(N), P)

def sm(Z):
    Z = Z - Z.max(1, keepdims=True); E = np.exp(Z); return E / E.sum(1, keepdims=True)
def loss(W):
    return -np.mean(np.log(sm(Xte @ W.T)[np.arange(len(yte)), yte] + 1e-12))
def grads(W, r):
    G = []
    for p in range(P):
        b = r.choice(shards[p], K); S = sm(Xtr[b] @ W.T); S[np.arange(K), ytr[b]] -= 1
        G.append(S.T @ Xtr[b])
    return G
def lowrank(M, R, V):
    if R >= min(J, D):
        return M, V
    U = np.linalg.qr(M @ V)[0]; Vn = M.T @ U; return U @ Vn.T, Vn

def full():
    r = np.random.default_rng(1); W = np.zeros((J, D)); c = []
    for t in range(clocks):
        W = W - LR * sum(grads(W, r)) / (P * K)
        if (t + 1) % 10 == 0: c.append(loss(W))
    return c

def tree(Q, R, Rd):
    r = np.random.default_rng(1); W = np.zeros((J, D)); c = []
    parent = [None] + [(n - 1) // Q for n in range(1, P)]
    depth = [0] * P
    for n in range(1, P): depth[n] = depth[parent[n]] + 1
    H = max(depth); order = sorted(range(P), key=lambda n: -depth[n])
    E = [np.zeros((J, D)) for _ in range(P)]; V = [r.normal(size=(D, R)) for _ in range(P)]
    Vr = r.normal(size=(D, Rd)); inbox = [np.zeros((J, D)) for _ in range(P)]; down = []
    for t in range(clocks):
        G = grads(W, r); nxt = [np.zeros((J, D)) for _ in range(P)]
        for n in order:
            M = E[n] + G[n] + inbox[n]
            if n == 0:
                q, Vr = lowrank(M, Rd, Vr); down.append(q)
            else:
                q, V[n] = lowrank(M, R, V[n]); nxt[parent[n]] += q
            E[n] = M - q
        inbox = nxt
        if len(down) > H:  # the deepest replica applies the root's sum H clocks late
            W = W - LR * down.pop(0) / (P * K)
        if (t + 1) % 10 == 0: c.append(loss(W))
    return c

c = full() if mode == "full" else tree(*map(int, sys.argv[5:8]))
target = 2.676
hit = next((10 * (i + 1) for i, x in enumerate(c) if x <= target), None)
print(f"{mode} lr {LR} {sys.argv[5:]}: target at clock {hit}, min {min(c):.4f}, "
      f"final {c[-1]:.4f}, rise after min {(c[-1] - min(c)) / min(c) * 100:.1f}%")
