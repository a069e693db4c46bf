"""Searches built on the structures' oracles: MIPS over class weights (``mips``), the
slack-rescaling searches (``slack``), the LP relaxation of the pairwise multi-label MRF (``lp``)."""
