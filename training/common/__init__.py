"""What every pipeline shares: input errors, output folders (resume, staging, publishing), launching processes."""
