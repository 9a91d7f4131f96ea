"""Task variants: one Harbor task directory per problem × DSL (instruction, files, tests)."""
