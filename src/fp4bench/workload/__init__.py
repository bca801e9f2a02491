"""What a run measures: GEMM ``problems`` (value objects), ``decode`` workloads (model + batch + TP +
routing -> problems) and seeded ``operands`` per problem."""
