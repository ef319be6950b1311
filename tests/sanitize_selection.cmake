# The `sanitize` ctest label: what scripts/test_sanitized.sh runs in the `dev` build (ASan + UBSan + LeakSanitizer)
# on every CI run. ctest reads this file after the discovered GoogleTest lists (tests/CMakeLists.txt adds it to
# TEST_INCLUDE_FILES), so it runs in ctest's script mode and sees <binary>_TESTS, the names gtest_discover_tests
# found. Every test of rbee_unit_tests, rbee_server_tests and rbee_sd_tests gets the label, except the cases that
# match a pattern of kLeftToOptimizedBuild and none of kKeptAsRepresentatives. The excluded cases still run in the
# optimized build (scripts/test.sh runs every test). api_tests and layer_check carry the label in
# tests/CMakeLists.txt (sd_api_tests does not: past 1800 s under ASan, see there).
#
# Why these: under ASan at -O1 each of them takes minutes (whole-model greedy or sampled runs compared with
# other whole-model runs), or they are long tables of reference cases that repeat the same code with other data;
# the sanitizers learn nothing from the repetition that the kept cases do not already show. The first full run
# (docs/RELIABILITY.md, "Sanitizers in CI") spent 4664 s of serial test time, most of it in these.

# Regular expressions over test names (CMake regex syntax), each with its reason.
set(kLeftToOptimizedBuild
  # 157 template-feature cases against Jinja2's output: one process each, the same interpreter paths with
  # other templates (representatives below; ChatTemplateRobustness / Limits / Errors stay whole).
  "^All/ChatTemplateFeature\\."
  # 194 official templates x conversations against transformers' output: same renderer, other data.
  "^All/ChatTemplateGolden\\."
  # Whole-model scheduler runs, each compared with a second whole-model run without the prefix cache.
  "^PrefixCacheScheduler\\."
  # Speculative decoding: greedy / sampled whole-model runs against plain decoding.
  "^SpeculativeScheduler\\.Greedy"
  "^SpeculativeScheduler\\.StopSequencesMaxTokensAndAWarmPrefixCacheStayExact"
  # Batched-equals-alone comparisons over the default model (SchedulerTest's other cases run the scheduler).
  "^SchedulerTest\\.(GreedyBatchedEqualsAlone|GreedyBatchedEqualsAloneWithSmallPrefillChunks|SeededSamplingBatchedEqualsAlone|LongPromptDoesNotStallOtherStreams)$"
  # Choices and logprobs over the default model, each compared with a second run of it (the cheaper cases of
  # SchedulerChoices stay: refusals, stop ids, min tokens, prompt-only jobs, embeddings, biased logprobs).
  "^SchedulerChoices\\.(GreedyChoicesShareOnePromptEvaluation|LogprobsAndPenaltiesDoNotChangeSeededTokens|SeededChoicesDifferAndTheFirstMatchesNEqualsOne|LogprobsEqualLogSoftmaxOfTheLogits)$"
  # The grammar mask checked token by token over the whole vocabulary (the other Grammar cases stay).
  "^Grammar\\.MasksMatchATokenByTokenCheck$"
  # Model splits over host instances, whole-model runs compared bit for bit with the unsplit model.
  "^MultiDevice\\.(SchedulerOnASplitModel|TensorSplitDefaultModelUnevenHeads|TensorSplitEveryArchitecture|BenchDecodeStepsAreGreedyGeneration)$"
  # Loads the default model twice (host and an instance) to compare its plan with the bytes really allocated.
  "^MemoryPlan\\.DefaultModelOnTheHostAndOnAnInstance$"
)
set(kKeptAsRepresentatives
  # One case per kind of template feature: whitespace control, literals, loops, macros, namespaces, filters,
  # strftime, a chat loop, runtime errors and syntax errors (their messages and positions).
  "^All/ChatTemplateFeature\\.MatchesJinja/(ws_crlf|print_repr_unicode|for_loop_vars|macro_recursive|namespace|f_tojson_escapes|f_format|strftime_now|chat_style|err_raise_exception|err_range_too_big|syn_unclosed_for|syn_bad_char)$"
  # Official templates: Llama 3.1, Qwen 3, gpt-oss and the built-in ChatML fallback, one conversation each.
  "^All/ChatTemplateGolden\\.MatchesTransformers/(llama_3_1|qwen_3|gpt_oss|builtin_chatml)_multi_turn$"
  # One prefix-cache scheduler case: a multi-turn continuation reusing generated blocks.
  "^PrefixCacheScheduler\\.MultiTurnContinuationReusesGeneratedBlocks$"
)

foreach(binary_label IN ITEMS "rbee_unit_tests;unit" "rbee_server_tests;server" "rbee_sd_tests;sd")
  list(GET binary_label 0 binary)
  list(GET binary_label 1 label)
  if(NOT DEFINED ${binary}_TESTS)
    continue()  # not built: ctest reports <binary>_NOT_BUILT
  endif()
  foreach(test IN LISTS ${binary}_TESTS)
    # Parametrized names carry gtest's "  # GetParam() = ..." comment: match on the name before it.
    string(REGEX REPLACE "  # .*$" "" name "${test}")
    set(selected TRUE)
    foreach(pattern IN LISTS kLeftToOptimizedBuild)
      if(name MATCHES "${pattern}")
        set(selected FALSE)
        break()
      endif()
    endforeach()
    if(NOT selected)
      foreach(pattern IN LISTS kKeptAsRepresentatives)
        if(name MATCHES "${pattern}")
          set(selected TRUE)
          break()
        endif()
      endforeach()
    endif()
    if(selected)
      set_tests_properties("${test}" PROPERTIES LABELS "${label};sanitize")
    endif()
  endforeach()
endforeach()
