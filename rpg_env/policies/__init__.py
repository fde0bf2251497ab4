"""Policies over batches of one-hot views: the protocol (`base`), scripted ones (`scripted`),
trained Stable-Baselines3 experts (`sb3`, with their features extractors in `features`), and
`make_policy` (`registry`), which builds any of them from a name, a model or a ``.zip``."""
