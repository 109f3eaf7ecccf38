"""LDCT-IQA 2023: low-dose CT image-quality score regression."""
