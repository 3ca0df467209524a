# Placeholder-free stub: the paper stage renders the results book once other stages register targets.
