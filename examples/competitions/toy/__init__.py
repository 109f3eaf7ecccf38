"""A toy competition: referable retinopathy on tiny synthetic fundus photographs, one folder with everything."""
