"""The warm model: cold-start tool-use SFT, expert-iteration rounds, and its measure on held-out problems."""
