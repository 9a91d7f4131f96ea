"""Reference solutions in CuTe DSL and TIRx (``pNN_cute.py`` / ``pNN_tirx.py``).

Each file is a complete submission (``solve(*inputs)``) as an agent would hand it in; they are
data for the grader, not part of the catalog (the registry reads only the family folders).
Each file declares the architectures it is written for (``ARCHS``, ``problems/targets.py``);
``compile_check.py --arch sm_90a|sm_100a`` compiles the kernels of the files that declare the
arch on a CPU host with the DSLs installed;
``benchmarks/check_solutions_gpu.py`` grades them all on a CUDA host.
"""
