"""Decentralised (gossip) averaging: topologies, mixing weights and the sparse mixing step.

The engine-free parts of decentralised training: who talks to whom in a round
(:mod:`._topology`), with which weights (:mod:`._weights`), and one mixing step W X at the
cost of the edges (:mod:`._mixing`). Public names in :mod:`fedjax_abc.decentral`.
"""
