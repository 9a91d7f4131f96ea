"""The 74-problem catalog: one module per problem, a registry and validation."""
