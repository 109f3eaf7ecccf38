"""USenhance 2023: ultrasound image enhancement."""
