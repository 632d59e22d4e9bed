"""scripts/sass-loop.py's parsing of nvdisasm text (no GPU, no CUDA tools, no torch needed)."""
import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
spec = importlib.util.spec_from_file_location("sass_loop", os.path.join(ROOT, "scripts", "sass-loop.py"))
sass_loop = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sass_loop)

# A function with a 3-instruction walk loop holding LDGSTS and a longer 4-instruction epilogue loop.
LISTING = """
\t.section\t.text._ZN7normkit4cuda56_GLOBAL__N__53d020d5_17_fused_backward_cu_240c7c54_1735421fused_kernelEv,"ax",@progbits
        /*0000*/                   LDC R1, c[0x0][0x28] ;
.L_x_1:
        /*0010*/               @!P0 LDGSTS.E.BYPASS.128 [R2], desc[UR4][R4.64] ;
        /*0020*/                   FADD R5, R5, R6 ;
        /*0030*/               @P1 BRA `(.L_x_1) ;
.L_x_2:
        /*0040*/                   LDS R7, [R8] ;
        /*0050*/                   FADD R9, R9, R7 ;
        /*0060*/                   IADD3 R8, R8, 0x4, RZ ;
        /*0070*/               @P2 BRA `(.L_x_2) ;
        /*0080*/                   EXIT ;
"""


def only_function():
    (name, lines), = list(sass_loop.functions(LISTING))
    return name, lines


def test_the_longest_loop_or_the_longest_holding_an_opcode():
    _, lines = only_function()
    longest = sass_loop.opcodes(sass_loop.main_loop(lines))
    assert longest == {"LDS": 1, "FADD": 1, "IADD3": 1, "BRA": 1}
    walk = sass_loop.opcodes(sass_loop.main_loop(lines, "LDGSTS"))
    assert walk == {"LDGSTS": 1, "FADD": 1, "BRA": 1}  # predicated instructions count by their opcode
    assert sass_loop.main_loop(lines, "SHFL") is None
    summary, ops = sass_loop.report(lines, "LDGSTS", 3)
    assert summary == "function 9 instructions, main loop 3 = 1.0 per element"
    assert sass_loop.report(lines, "SHFL", 0) == ("function 9 instructions, no loop holding SHFL", None)


# The walk loop (.L_x_1) with a cold block placed after the function's EXIT that branches back into it:
# that backward branch spans the whole function and must not be read as the loop.
COLD_BLOCK = """
\t.section\t.text._Z11walk_kernelv,"ax",@progbits
        /*0000*/                   LDC R1, c[0x0][0x28] ;
.L_x_1:
        /*0010*/               @!P0 LDGSTS.E.BYPASS.128 [R2], desc[UR4][R4.64] ;
.L_x_3:
        /*0020*/                   FADD R5, R5, R6 ;
        /*0030*/               @P3 BRA `(.L_x_4) ;
        /*0040*/               @P1 BRA `(.L_x_1) ;
        /*0050*/                   EXIT ;
.L_x_4:
        /*0060*/                   LDGSTS.E.BYPASS.128 [R2], desc[UR4][R4.64] ;
        /*0070*/                   MOV R6, RZ ;
        /*0080*/                   BRA `(.L_x_3) ;
"""


def test_a_cold_block_branching_back_is_not_the_loop():
    (_, lines), = list(sass_loop.functions(COLD_BLOCK))
    walk = sass_loop.opcodes(sass_loop.main_loop(lines, "LDGSTS"))
    assert walk == {"LDGSTS": 1, "FADD": 1, "BRA": 2}
    # only bodies holding an EXIT: the longest of them, as before
    only_exit = [line for line in lines if "@P1 BRA" not in line]
    assert sass_loop.opcodes(sass_loop.main_loop(only_exit, "LDGSTS"))["EXIT"] == 1


def test_names_match_across_builds_without_the_anonymous_namespace_hash():
    name, _ = only_function()
    other_build = name.replace("240c7c54_173542", "0c44e091_125222")
    assert name != other_build
    assert sass_loop.stable_name(name) == sass_loop.stable_name(other_build)
    assert sass_loop.stable_name(name) == "_ZN7normkit4cuda<anonymous>21fused_kernelEv"
    assert sass_loop.stable_name("_Z6kernelv") == "_Z6kernelv"
