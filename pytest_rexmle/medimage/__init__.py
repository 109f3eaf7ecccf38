"""Medical image files as graders and preparers need them: geometry-checked reading and writing
(:mod:`.geometry`) and empty NIfTI masks made from a header alone (:mod:`.nifti`)."""
