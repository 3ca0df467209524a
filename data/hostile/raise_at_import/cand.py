# Hostile: raises while its module is being imported, before ModelNew exists.
raise ImportError("hostile: this candidate refuses to be imported")
