#!/usr/bin/env python3
"""Golden outputs for rbee's chat-template interpreter, rendered by transformers + Jinja2 (the peer).

Writes two files under tests/data/chat_templates/:
  goldens.json   official templates (tests/data/chat_templates/*.jinja) and rbee's built-in templates (read from
                 src/llm/chat/builtin_templates.cpp) x a set of conversations, each with the exact render context
                 and the string transformers' render_jinja_template returns (or the error it raises).
  features.json  small templates exercising one interpreter feature each (whitespace control, expressions,
                 filters, tests, methods, loops, macros, errors), rendered in transformers' own Jinja environment.

Usage:  .venv/bin/python tools/goldens/make_chat_template_goldens.py [--smollm2-gguf PATH]
With --smollm2-gguf the SmolLM2 template is (re)extracted from the GGUF's tokenizer.chat_template first.
"""
import argparse
import json
import re
import sys
from pathlib import Path

import datetime

import jinja2
import transformers
from transformers.utils import chat_template_utils
from transformers.utils.chat_template_utils import _compile_jinja_template, render_jinja_template

# strftime_now() formats this local time (Granite and gpt-oss print today's date); the test passes the same time
# through ChatRenderOptions::now.
FIXED_NOW = datetime.datetime(2025, 4, 1, 12, 30, 45)


class _FixedDatetime(datetime.datetime):
    @classmethod
    def now(cls, tz=None):
        return FIXED_NOW


chat_template_utils.datetime = _FixedDatetime  # what HF's strftime_now calls

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "chat_templates"
BUILTIN_SOURCE = ROOT / "src" / "llm" / "chat" / "builtin_templates.cpp"
SMOLLM2_FILE = "HuggingFaceTB-SmolLM2-135M-Instruct.jinja"

# Llama 3.x templates print today's date unless date_string is given; fix it so the golden is stable.
LLAMA_DATE = {"date_string": "26 Jul 2024"}

# name -> (template file, special tokens and extra variables as the tokenizer would pass them)
OFFICIAL = {
    "llama-3.1": ("meta-llama-Llama-3.1-8B-Instruct.jinja", {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", **LLAMA_DATE}),
    "llama-3.2": ("meta-llama-Llama-3.2-3B-Instruct.jinja", {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", **LLAMA_DATE}),
    "llama-3.3": ("meta-llama-Llama-3.3-70B-Instruct.jinja", {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", **LLAMA_DATE}),
    "qwen-2.5": ("Qwen-Qwen2.5-7B-Instruct.jinja", {"bos_token": "", "eos_token": "<|im_end|>"}),
    "smollm2": (SMOLLM2_FILE, {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"}),
    "gemma-2": ("google-gemma-2-2b-it.jinja", {"bos_token": "<bos>", "eos_token": "<eos>"}),
    "phi-3.5": ("microsoft-Phi-3.5-mini-instruct.jinja", {"bos_token": "<s>", "eos_token": "<|endoftext|>"}),
    "mistral-nemo": ("mistralai-Mistral-Nemo-Instruct-2407.jinja", {"bos_token": "<s>", "eos_token": "</s>"}),
    # Further official templates, for interpreter coverage (namespaces, reversed loops, macros, string methods).
    "qwen-3": ("Qwen-Qwen3-0.6B.jinja", {"bos_token": "", "eos_token": "<|im_end|>"}),
    "deepseek-r1-qwen": ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", {"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>"}),
    "hermes-3": ("NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", {"bos_token": "<|begin_of_text|>", "eos_token": "<|im_end|>"}),
    "smollm3": ("HuggingFaceTB-SmolLM3-3B.jinja", {"bos_token": "", "eos_token": "<|im_end|>"}),
    "granite-3.3": ("ibm-granite-granite-3.3-2B-Instruct.jinja", {"bos_token": "<|end_of_text|>", "eos_token": "<|end_of_text|>", "date_string": "April 01, 2025"}),
    "gpt-oss": ("openai-gpt-oss-120b.jinja", {"bos_token": "<|startoftext|>", "eos_token": "<|return|>"}),
}

BUILTIN_TOKENS = {
    "chatml": {"bos_token": "", "eos_token": "<|im_end|>"},
    "llama3": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "llama2": {"bos_token": "<s>", "eos_token": "</s>"},
    "mistral": {"bos_token": "<s>", "eos_token": "</s>"},
    "gemma": {"bos_token": "<bos>", "eos_token": "<eos>"},
    "phi3": {"bos_token": "<s>", "eos_token": "<|endoftext|>"},
}

def msg(role, content):
    return {"role": role, "content": content}

# name -> (messages, add_generation_prompt). Plain role/content messages, as rbee::llm::ChatMessage holds them.
CONVERSATIONS = {
    "system_user": ([msg("system", "You are a helpful assistant."), msg("user", "What is the capital of France?")], True),
    "multi_turn": ([msg("system", "Answer in one word."), msg("user", "Capital of France?"), msg("assistant", "Paris"),
                    msg("user", "And of Italy?")], True),
    "no_system": ([msg("user", "Hi there!"), msg("assistant", "Hello! How can I help?"), msg("user", "Tell me a joke.")], True),
    "no_system_no_gen": ([msg("user", "Hi there!"), msg("assistant", "Hello! How can I help?")], False),
    "single_user_no_gen": ([msg("user", "Just one message.")], False),
    "unicode": ([msg("system", "Tu es un assistant 🐝 — réponds en français."),
                 msg("user", "\u3000 Ünïcödé: 日本語テキスト, emoji 🚀, Ελληνικά, кириллица \u00a0\n"),
                 msg("assistant", "Très bien ✓ ß"), msg("user", "…et ensuite ?")], True),
    "jinja_like": ([msg("system", "{{ not_a_variable }} {% raw %} {%- if x -%}"),
                    msg("user", "Explain {% for x in y %}{{ x }}{% endfor %} and {# comment #}"),
                    msg("assistant", "'single' \"double\" \\backslash\\ <|im_end|> [INST]"),
                    msg("user", "{{ raise_exception('not really') }}")], True),
    "whitespace": ([msg("user", "\n\n  leading and trailing whitespace\t \n"), msg("assistant", "  ok  "),
                    msg("user", "line1\r\nline2\n\n\nline5")], True),
    "empty_content": ([msg("system", ""), msg("user", ""), msg("assistant", ""), msg("user", "?")], True),
}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city — e.g. Zürich",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}

# Conversations with tools and tool calls, for the templates that support them (rendered through ChatTemplate
# with the full context, since they carry more than role/content).
TOOL_CONVERSATIONS = {
    "tools_call": ([msg("system", "You can call tools."), msg("user", "What's the weather in Zürich?"),
                    {"role": "assistant", "content": "", "tool_calls": [{"id": "call12345", "type": "function",
                     "function": {"name": "get_weather", "arguments": {"city": "Zürich", "unit": "celsius"}}}]},
                    {"role": "tool", "tool_call_id": "call12345", "name": "get_weather",
                     "content": "{\"temperature\": 21.5, \"sky\": \"clear\"}"}], True),
    "tools_first_turn": ([msg("user", "Weather in Oslo, please.")], True),
}
TOOL_TEMPLATES = ["llama-3.1", "llama-3.2", "llama-3.3", "qwen-2.5", "mistral-nemo", "qwen-3", "hermes-3"]


def read_builtins():
    text = BUILTIN_SOURCE.read_text()
    sources = dict(re.findall(r'constexpr std::string_view (k\w+) = R"jinja\((.*?)\)jinja";', text, re.S))
    names = re.findall(r'\{"(\w+)", (k\w+)\}', text)
    out = {name: sources[var] for name, var in names}
    if set(out) != set(BUILTIN_TOKENS):
        sys.exit(f"built-in families in {BUILTIN_SOURCE} are {sorted(out)}, expected {sorted(BUILTIN_TOKENS)}")
    return out


def render(source, messages, add_generation_prompt, tokens, tools=None):
    """Returns (context, expected, error) exactly as transformers renders it."""
    kwargs = dict(tokens)
    context = {"messages": messages, "tools": tools, "documents": None,
               "add_generation_prompt": add_generation_prompt, **kwargs}
    try:
        rendered, _ = render_jinja_template(conversations=[messages], tools=tools, documents=None,
                                            chat_template=source, add_generation_prompt=add_generation_prompt,
                                            **kwargs)
        return context, rendered[0], None
    except Exception as e:  # TemplateError (raise_exception, undefined) or a Python error (TypeError, ...)
        return context, None, {"type": type(e).__name__, "message": str(e)}


def make_goldens():
    cases = []
    templates = {}
    for name, (file, tokens) in OFFICIAL.items():
        source = (DATA / file).read_text()
        templates[name] = {"file": file}
        for conv, (messages, gen) in CONVERSATIONS.items():
            cases.append(case(name, conv, source, messages, gen, tokens, apply=True))
        if name in TOOL_TEMPLATES:
            for conv, (messages, gen) in TOOL_CONVERSATIONS.items():
                cases.append(case(name, conv, source, messages, gen, tokens, tools=[WEATHER_TOOL], apply=False))
    for family, source in read_builtins().items():
        name = "builtin:" + family
        templates[name] = {"builtin": family}
        for conv, (messages, gen) in CONVERSATIONS.items():
            cases.append(case(name, conv, source, messages, gen, BUILTIN_TOKENS[family], apply=True))
    return {"generator": "tools/goldens/make_chat_template_goldens.py",
            "transformers": transformers.__version__, "jinja2": jinja2.__version__,
            "now": FIXED_NOW.isoformat(), "templates": templates, "cases": cases}


def case(template, conv, source, messages, gen, tokens, tools=None, apply=False):
    context, expected, error = render(source, messages, gen, tokens, tools)
    out = {"template": template, "conversation": conv, "context": context,
           # apply: the case only has role/content messages, so apply_chat_template() can reproduce it too.
           "apply": apply}
    if error is None:
        out["expected"] = expected
    else:
        out["error"] = error
    return out


# ---- interpreter features ---------------------------------------------------------------------------------

FEATURE_CONTEXT = {
    "messages": [msg("system", "Be brief."), msg("user", "Hi"), msg("assistant", "Hello!"), msg("user", "Bye")],
    "s": "  Héllo Wörld  ", "n": 7, "f": 2.5, "neg": -3, "items": [3, 1, 2], "words": ["b", "A", "c", "a"],
    "d": {"b": 2, "a": 1, "items": "not-a-method"}, "nested": {"x": {"y": [10, 20, {"z": "deep"}]}},
    "users": [{"name": "Ann", "age": 31, "admin": True}, {"name": "bob", "age": 25, "admin": False},
              {"name": "Cid", "age": 31}],
    "none_val": None, "t": True, "empty": [], "text": "line1\nline2\n\nline4", "unicode": "日本語 🐝 ß",
    "nums": {"b": 1, "A": 2, "c": 0}, "tools": [WEATHER_TOOL],
}

FEATURES = [
    # whitespace control, trim_blocks and lstrip_blocks
    ("ws_block_lines", "a\n  {% if true %}\n  yes\n  {% endif %}\nb"),
    ("ws_dash_both", "x  {%- if true -%}  y  {%- endif -%}  z"),
    ("ws_var_not_lstripped", "  {{ 'v' }}  \n  {{ 'w' }}"),
    ("ws_comment_line", "line\n    {# comment #}\nnext"),
    ("ws_for_lines", "{% for i in [1, 2] %}\n  {{ i }}\n{% endfor %}\nend"),
    ("ws_plus_disables", "a\n  {%+ if true %}x{% endif +%}\ny"),
    ("ws_dash_var", "{{- 'a' -}}\n\n  {{ 'b' }}\n\n  {{- 'c' }}"),
    ("ws_tab_dash", "x \t{%- if true %}y{% endif %}"),
    ("ws_crlf", "\r\n line \r\n{% if true %}\r\nz{% endif %}\r\n"),
    ("ws_trailing_newline", "abc\n"),
    ("ws_two_trailing_newlines", "abc\n\n"),
    ("ws_start_of_template", "   {% if true %}a{% endif %}"),
    ("ws_after_var_no_lstrip", "{{ 1 }}  {% if true %}a{% endif %}"),
    ("ws_between_blocks", "{% if true %}a{% endif %}   {% if true %}b{% endif %}"),
    ("ws_line_starting", "{% if true %}\n   {% if true %}b{% endif %}{% endif %}"),
    ("ws_raw", "a\n{%- raw %} {{ x }} {% if %}{% endraw -%}\n b"),
    ("ws_comment_dash", "a   {#- c -#}   b"),
    ("ws_unicode_space_dash", "a\u3000\u00a0{{- 'b' -}}\u2003c"),
    ("ws_block_end_newline_only_one", "{% if true %}\n\nx{% endif %}"),
    ("ws_set_lines", "  {% set x = 1 %}\n  {{ x }}\n"),
    # literals and printing
    ("lit_numbers", "{{ 1 }} {{ -1 }} {{ 1.5 }} {{ 1e3 }} {{ 1_000 }} {{ 0x1F }} {{ 0o17 }} {{ 0b101 }} {{ 2.5E-3 }}"),
    ("lit_strings", "{{ 'a' 'b' }} {{ \"q\" }} {{ 'esc\\ttab\\nnl \\u00e9 \\x41 \\101 \\\\ \\' \\\" \\q' }}"),
    ("lit_containers", "{{ [1, 'two', none, true, 2.0] }} {{ {'a': 1, 'b': [1, 2]} }} {{ (1,) }} {{ (1, 2) }} {{ () }} {{ [] }} {{ {} }}"),
    ("print_floats", "{{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1e15 }} {{ 1e-5 }} {{ 0.0001 }} {{ 123456789.0 }} {{ 1/3 }} {{ -0.0 }} {{ 2.5e-3 }} {{ 1e300 * 1e10 }}"),
    ("print_scalars", "{{ none }} {{ true }} {{ false }} {{ none_val }} {{ t }} [{{ '' }}]"),
    ("print_repr", "{{ [none, false, 'it\\'s', 'say \"hi\"', 'both \\' \"', 'tab\\t', 'nl\\n', '\\x01', '\\\\'] }}"),
    ("print_repr_unicode", "{{ ['日本', '🐝', 'é', '\u00a0', '\u200b', '\u3000'] }} {{ {'k': none, 'n': [1.5, 2]} }}"),
    ("print_tuple_expr", "{{ 1, 'a' }}"),
    ("print_dicts", "{{ d }} {{ users[0] }} {{ nested }}"),
    # arithmetic and operators
    ("math", "{{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 2 ** 3 ** 2 }} {{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 1 + 1.5 }} {{ true + 1 }} {{ 6 / 3 }} {{ -2 ** 2 }} {{ 10 - 2 - 3 }}"),
    ("string_ops", "{{ 'ab' * 3 }} {{ 3 * 'x' }} {{ 'a' ~ 1 ~ none ~ true }} {{ 'a' + 'b' }} {{ [1] + [2] }} {{ 'a' ~ undefined_var ~ 'b' }} {{ 'x' + 2 ~ 3 }} {{ [0] * 3 }}"),
    ("percent_format", "{{ 'x=%s' % 5 }} {{ '%s/%s' % (1, 2) }} {{ '%05.1f' % 3.14159 }} {{ '%d%%' % 50 }} {{ '%(a)s-%(b)r' % {'a': 1, 'b': 'q'} }} {{ '%x %X %o' % (255, 255, 8) }} {{ '[%5s|%-5s]' % ('r', 'l') }} {{ '%.2s' % 'abcdef' }} {{ '%i' % 3.9 }}"),
    ("compare", "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 'a' != 'a' }} {{ none == none }} {{ 1 == '1' }} {{ true == 1 }} {{ 'B' < 'a' }} {{ 2 >= 2 }} {{ 'é' > 'z' }}"),
    ("in_operator", "{{ 'ell' in 'hello' }} {{ 2 in [1, 2] }} {{ 'a' in {'a': 1} }} {{ 'z' not in 'abc' }} {{ 'x' in undefined_var }} {{ 'tool_calls' in messages[0] }} {{ 'role' in messages[0] }} {{ (1, 2) in [(1, 2)] }}"),
    ("logic", "{{ none or 'default' }} {{ 0 and 'x' }} {{ 'a' and 'b' }} {{ not 0 }} {{ not [] }} {{ [] or [1] }} {{ not none_val and t }} {{ 1 if not items else 2 }}"),
    ("condexpr", "{{ 'y' if 1 else 'n' }} {{ 'y' if 0 else 'n' }} [{{ 'y' if 0 }}] {{ 'a' if false else 'b' if true else 'c' }} {{ ('p' if t) ~ 'q' }}"),
    ("subscripts", "{{ messages[0].role }} {{ messages[-1]['content'] }} {{ nested.x.y[2].z }} {{ nested['x']['y'][0] }} {{ nested.x.y.1 }} [{{ items[10] }}] [{{ messages[0].nope }}] {{ d['items'] }} {{ 'abc'[1] }} {{ unicode[1] }} {{ unicode[-1] }}"),
    ("slices", "{{ items[1:] }} {{ items[:-1] }} {{ items[::-1] }} {{ items[::2] }} {{ s[2:7] }} {{ unicode[::-1] }} {{ unicode[1:3] }} {{ items[5:] }} {{ items[-10:2] }} {{ 'abcdef'[4:1:-1] }} {{ 'abcdef'[-2:] }} {{ messages[1:]|length }} {{ items[:] }}"),
    ("dict_methods_vs_items", "{{ d.items()|list }} {{ d['items'] }} {{ d.items is defined }} {{ d.keys()|list }} {{ d.values()|list }} {{ d.get('a') }} {{ d.get('zz') }} {{ d.get('zz', 'dflt') }}"),
    ("list_methods", "{{ items.index(2) }} {{ items.count(1) }} {{ [1, 1, 2].count(1) }}"),
    # undefined values
    ("undefined_soft", "[{{ nope }}] {{ nope is defined }} {{ nope is undefined }} {{ nope|length }} {{ nope|default('dflt') }} {{ none|default('x') }} {{ ''|default('x', true) }} {{ nope|list }} {{ d.missing is defined }} [{{ d.missing }}] [{% for x in nope %}{{ x }}{% endfor %}] {{ not nope }} {{ nope == nope }} {{ nope|string }}|{{ nope|trim }}|{{ nope|upper }}|{{ nope|join(',') }}|{{ nope|d('dd') }}"),
    ("undefined_attr_of_str", "{{ 'x'.nope is defined }} {{ (5).nope is defined }} {{ none_val.nope is defined }}"),
    # statements
    ("for_loop_vars", "{% for x in items %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}"),
    ("for_prev_next_cycle", "{% for x in items %}{{ loop.previtem }}-{{ loop.nextitem }}-{{ loop.cycle('a', 'b') }};{% endfor %}"),
    ("for_filter", "{% for x in items if x > 1 %}{{ x }}:{{ loop.index }}/{{ loop.length }}{{ ' ' if not loop.last }}{% endfor %}"),
    ("for_else", "{% for x in empty %}{{ x }}{% else %}none{% endfor %}{% for x in [1] %}{{ x }}{% else %}none{% endfor %}"),
    ("for_unpack", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k, v in nums|items %}{{ k }}{{ v }}{% endfor %} {% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %} {% for (a, b) in [(1, 2)] %}{{ a }}{{ b }}{% endfor %}"),
    ("for_dict_and_string", "{% for k in d %}{{ k }},{% endfor %} {% for c in 'héy' %}[{{ c }}]{% endfor %}"),
    ("for_nested_outer_loop", "{% for a in [1, 2] %}{% set outer = loop %}{% for b in 'xy' %}{{ outer.index }}{{ loop.index }}{{ b }} {% endfor %}{% endfor %}"),
    ("for_break_continue", "{% for x in range(10) %}{% if x == 7 %}{% break %}{% endif %}{% if x is odd %}{% continue %}{% endif %}{{ x }}{% endfor %}"),
    ("for_reverse_slice", "{% for m in messages[::-1] %}{{ loop.index0 }}{{ m.role[0] }}{% endfor %}"),
    ("scoping_loop", "{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}"),
    ("scoping_if", "{% if true %}{% set y = 5 %}{% endif %}{{ y }}"),
    ("namespace", "{% set ns = namespace(total=0, names=[]) %}{% for u in users %}{% set ns.total = ns.total + u.age %}{% set ns.names = ns.names + [u.name] %}{% endfor %}{{ ns.total }} {{ ns.names }} {{ ns.missing is defined }}"),
    ("namespace_dict_arg", "{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}{{ ns['a'] }}"),
    ("set_tuple", "{% set a, b = 1, 2 %}{{ a }}{{ b }} {% set t2 = 1, 2 %}{{ t2 }} {% set p, q = 'xy' %}{{ q }}{{ p }}"),
    ("set_block", "{% set block %}Hello {{ 'World' }}{% endset %}[{{ block }}] {% set up | upper %}abc{% endset %}{{ up }}"),
    ("macro_basic", "{% macro greet(name, greeting='Hello') %}{{ greeting }}, {{ name }}!{% endmacro %}{{ greet('Ann') }} {{ greet('Bob', 'Hi') }} {{ greet(name='Cid', greeting='Yo') }} [{{ greet() }}]"),
    ("macro_recursive", "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1) | int }}{% endif %}{% endmacro %}{{ fact(6) }}"),
    ("macro_sees_globals", "{% set suffix = '!' %}{% macro shout(x) %}{{ x|upper }}{{ suffix }}{% endmacro %}{{ shout('hey') }}"),
    ("macro_default_uses_param", "{% macro m(a, b=a * 2) %}{{ a }}-{{ b }}{% endmacro %}{{ m(3) }} {{ m(3, 1) }}"),
    ("filter_block", "{% filter upper %}hello {{ 'x' }}{% endfilter %} {% filter trim|replace('a', 'o') %}  banana  {% endfilter %}"),
    ("with_block", "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}{{ a is defined }}"),
    ("generation_block", "{% generation %}gen {{ 1 }}{% endgeneration %}"),
    ("comments", "a{# c1 #}b{#- c2 -#} c {# multi\nline #}d"),
    ("if_elif_else", "{% for v in [0, 1, 2, 'x'] %}{% if v == 0 %}zero{% elif v == 1 %}one{% elif v is string %}str{% else %}other{% endif %} {% endfor %}"),
    # filters
    ("f_trim", "[{{ s|trim }}] [{{ '--x--'|trim('-') }}] [{{ '\u3000 u \u00a0\n'|trim }}] [{{ 5|trim }}]"),
    ("f_case", "{{ s|upper }} {{ s|lower }} {{ 'hELLO wORLD'|capitalize }} {{ 'hello-world (foo) [bar] <baz>  x'|title }} {{ \"they're bill's\"|title }} {{ unicode|upper }} {{ 'ÀÉÎ ÑÇ'|lower }} {{ 'ωμέγα'|upper }}"),
    ("f_length", "{{ items|length }} {{ d|count }} {{ unicode|length }} {{ 'abc'|count }} {{ empty|length }}"),
    ("f_tojson", "{{ tools|tojson }}"),
    ("f_tojson_indent", "{{ tools|tojson(indent=4) }}"),
    ("f_tojson_options", "{{ {'b': 1, 'a': [1, 2.5, none, true]}|tojson(sort_keys=true) }} {{ unicode|tojson }} {{ unicode|tojson(ensure_ascii=true) }} {{ d|tojson(separators=(',', ':')) }} {{ 'x'|tojson(indent='\t') }} {{ {'a': [1, 2]}|tojson(indent='--') }}"),
    ("f_tojson_escapes", "{{ 'quote\" back\\\\ nl\\n tab\\t cr\\r ctl\\x01 del\\x7f \u2028'|tojson }} {{ 'quote\" \\x01 🐝'|tojson(ensure_ascii=true) }}"),
    ("f_tojson_numbers", "{{ {'k': 1.0, 'e': 1e-7, 'big': 1e22, 'i': -5, 'b': false, 'n': none}|tojson }} {{ [1, [2, {}], {}, []]|tojson(indent=2) }} {{ {1: 'int key', none: 'x'}|tojson }}"),
    ("f_string_int_float", "{{ 42|string }} {{ '42'|int + 1 }} {{ '4.7'|int }} {{ 'abc'|int }} {{ 'abc'|int(-1) }} {{ '0x1A'|int(0, 16) }} {{ '0b11'|int(base=0) }} {{ '  12  '|int }} {{ 3.9|int }} {{ -3.9|int }} {{ '3.5'|float }} {{ 'x'|float }} {{ 2|float }} {{ true|int }} {{ none|int }} {{ '1_000'|int }} {{ '1e3'|float }} {{ ' -7 '|int }}"),
    ("f_join", "{{ items|join(', ') }} {{ users|join(',', attribute='name') }} {{ 'abc'|join('-') }} {{ [1, none, 'x']|join }} {{ d|join('/') }}"),
    ("f_first_last", "{{ items|first }} {{ items|last }} {{ 'abc'|first }} {{ 'abc'|last }} {{ d|first }} {{ d|last }} [{{ empty|first }}] {{ unicode|last }}"),
    ("f_items_list", "{{ d|items|list }} {{ 'ab'|list }} {{ d|list }} {{ (1, 2)|list }}"),
    ("f_map", "{{ users|map(attribute='name')|join(',') }} {{ words|map('upper')|join }} {{ users|map(attribute='missing', default='?')|join(',') }} {{ [[1, 2], [3]]|map('length')|list }} {{ users|map(attribute='name')|list }} {{ ['a', 'b']|map('replace', 'a', 'z')|list }} {{ nested|map('upper')|list }} {{ users|map(attribute='age')|sum }}"),
    ("f_select", "{{ users|selectattr('admin')|map(attribute='name')|join }} {{ users|rejectattr('admin')|map(attribute='name')|join }} {{ users|selectattr('age', 'equalto', 31)|map(attribute='name')|join }} {{ users|selectattr('age', '>', 26)|list|length }} {{ items|select('odd')|list }} {{ items|reject('odd')|list }} {{ [0, 1, '', 'a', none]|select|list }} {{ users|selectattr('admin', 'defined')|list|length }} {{ messages|selectattr('role', 'in', ['user', 'system'])|list|length }} {{ items|select('divisibleby', 3)|list }} {{ empty|select|list }}"),
    ("f_replace", "{{ 'aaa'|replace('a', 'b', 2) }} {{ s|replace(' ', '_') }} {{ 'abc'|replace('', '-') }} {{ 123|replace('2', 'two') }}"),
    ("f_safe_escape", "{{ '<b>'|safe }} {{ '<a href=\"x\">&\\'</a>'|e }} {{ '<>'|escape }}"),
    ("f_round_abs", "{{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 42.55|round(1, 'floor') }} {{ 42.51|round(1, 'ceil') }} {{ 5|round }} {{ -2.5|round }} {{ 1234.5|round(-2) }} {{ 0.5|round }} {{ 1.15|round(1) }} {{ -3|abs }} {{ -2.5|abs }} {{ 7|round(2, 'floor') }}"),
    ("f_unique", "{{ words|unique|list }} {{ words|unique(case_sensitive=true)|list }} {{ users|unique(attribute='age')|map(attribute='name')|join }} {{ [1, 1.0, true, 2]|unique|list }}"),
    ("f_dictsort", "{{ nums|dictsort }} {{ nums|dictsort(true) }} {{ nums|dictsort(by='value', reverse=true) }} {{ nums|dictsort(false, 'value') }}"),
    ("f_sort", "{{ items|sort }} {{ items|sort(reverse=true) }} {{ words|sort }} {{ words|sort(case_sensitive=true) }} {{ users|sort(attribute='age')|map(attribute='name')|join }} {{ users|sort(attribute='age,name', reverse=true)|map(attribute='name')|join }} {{ 'cba'|sort }}"),
    ("f_reverse", "{{ items|reverse|list }} {{ 'abc'|reverse }} {{ unicode|reverse }}"),
    ("f_sum_min_max", "{{ items|sum }} {{ users|sum(attribute='age') }} {{ items|sum(start=10) }} {{ items|min }} {{ items|max }} {{ words|min }} {{ words|max }} {{ words|max(case_sensitive=true) }} {{ users|max(attribute='age') }} {{ users|min(attribute='name') }} [{{ empty|max }}] {{ [1.5, 2]|sum }}"),
    ("f_batch", "{{ items|batch(2)|list }} {{ items|batch(2, 'x')|list }} {{ [1, 2, 3, 4]|batch(2)|list }}"),
    ("f_indent", "{{ text|indent }}|{{ text|indent(2, true) }}|{{ text|indent('> ', blank=true) }}|{{ ''|indent(first=true) }}"),
    ("f_center_truncate_wordcount", "[{{ 'ab'|center(7) }}] [{{ 'abc'|center(6) }}] {{ ('word ' * 60)|truncate(20) }}|{{ 'a very long sentence here'|truncate(12, true) }}|{{ 'short'|truncate(9) }}|{{ 'one two three four'|truncate(11, false, '..', 0) }} {{ 'Hello, wide world!  x_y 42'|wordcount }}"),
    ("f_format", "{{ '%s-%d-%.2f-%5s|%-5s|%x'|format('a', 42, 3.14159, 'r', 'l', 255) }} {{ '%(a)s+%(b)s'|format(a=1, b=2) }}"),
    ("f_attr", "{{ d|attr('items') is defined }} [{{ d|attr('a') }}] {{ (d|attr('keys'))()|list }}"),
    ("f_default_chain", "{{ messages[5]|default('no sixth')  }} {{ (nope or none)|default('x') }} {{ nope|default(none) }} {{ 0|d(5, true) }}"),
    # Markup (|safe, |e): combining it with plain strings HTML-escapes them, as markupsafe does
    ("markup_add", "{{ \"Use '\"|safe + \"<x>\" + \"'\"|safe + {'a': \"q'\"}|tojson }} {{ '<'|safe ~ '<' }} {{ ('%s-%s'|safe) % ('<', 1) }} {{ ('<b>'|safe)[1] }}|{{ ('<b>'|safe)[1:]|upper }}"),
    ("markup_methods", "{{ ('<a>'|safe).upper() }} {{ ('<a>'|safe).replace('a', '&') }} {{ ('a,b'|safe).split(',') }} {{ ('x'|safe).join(['<', 1]) }} {{ ('a{}b'|safe).format('<') }} {{ ('ab'|safe).startswith('a') }} {{ ('<a>'|safe)|replace('a', '&') }} {{ ('<a>'|safe)|title }} {{ ('%s'|safe)|format('<') }}"),
    ("markup_escape", "{{ ['<'|safe, '<'|e, '<'|forceescape] }} {{ '<'|e|e }} {{ ('<'|safe) is escaped }} {{ '<' is escaped }} {{ ('<b>'|safe)|trim|length }}"),
    # unknown filters/tests inside if blocks and conditional expressions fail only when evaluated
    ("soft_unknown_filter", "{% if false %}{{ 1|nosuch }}{% elif false %}{{ x is nosuchtest }}{% endif %}{{ (1|nosuch) if false else 2 }}"),
    # str methods
    ("m_strip_case", "{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ 'xxhixx'.strip('x') }}|{{ s.upper() }}|{{ s.lower() }}|{{ 'hello world'.title() }}|{{ \"they're 2nd\".title() }}|{{ 'hELLO'.capitalize() }}|{{ 'aBc'.swapcase() }}|{{ '\u3000 x \u00a0'.strip() }}|{{ '\\n\\nabc\\n'.lstrip('\\n') }}|{{ 'abc'.strip('') }}"),
    ("m_split", "{{ 'a,b,,c'.split(',') }} {{ '  a  b c '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ 'a\\nb\\r\\nc\\n'.splitlines() }} {{ '<think>r</think>\\n\\nx'.split('</think>')[-1].lstrip('\\n') }} {{ ' a b '.rsplit(none, 1) }} {{ ''.split() }} {{ ''.split(',') }} {{ 'a b'.split(maxsplit=0) }}"),
    ("m_misc", "{{ 'abc'.startswith('ab') }} {{ 'abc'.endswith(('x', 'c')) }} {{ 'aXbX'.replace('X', '-') }} {{ 'aXbX'.replace('X', '-', 1) }} {{ '-'.join(['a', 'b']) }} {{ 'hello'.find('l') }} {{ 'hello'.rfind('l') }} {{ 'hello'.count('l') }} {{ 'héllo'.find('l') }} {{ 'héllo'.find('z') }} {{ '42'.isdigit() }} {{ 'ab'.isalpha() }} {{ ' '.isspace() }} {{ 'abc'.islower() }} {{ 'ABC'.isupper() }} {{ 'ab'.center(6, '*') }} {{ 'ab'.ljust(4, '.') }}|{{ 'ab'.rjust(4) }} {{ '42'.zfill(5) }} {{ '-42'.zfill(5) }} {{ 'prefix_x'.removeprefix('prefix_') }} {{ 'x.py'.removesuffix('.py') }} {{ 'k=v=w'.partition('=') }}"),
    ("m_format", "{{ 'Hi {}, {name}! {0}'.format('Ann', name='Bob') if false else 'Hi {}, {name}!'.format('Ann', name='Bob') }} {{ '{:>5}|{:<5}|{:^5}|{:05d}|{:.2f}|{:,}|{:x}|{!r}|{:+d}|{:#x}|{:e}|{:.1%}'.format('a', 'b', 'c', 42, 3.14159, 1234567, 255, 'q', 5, 255, 12345.678, 0.256) }} {{ '{0}{1}{0}'.format('a', 'b') }} {{ '{{}} {}'.format(1) }} {{ '{x[0]} {y.k}'.format(x=[7], y={'k': 'v'}) }} {{ '{:*^9}'.format('mid') }} {{ '{}'.format(1.0) }} {{ '{:g}'.format(0.00001) }}"),
    # tests
    ("tests", "{{ none is none }} {{ 1 is number }} {{ 1.0 is float }} {{ 1 is integer }} {{ true is boolean }} {{ true is integer }} {{ 'a' is string }} {{ d is mapping }} {{ items is sequence }} {{ 'a' is iterable }} {{ d is iterable }} {{ 5 is iterable }} {{ items is mapping }} {{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(2) }} {{ 'x' is eq 'x' }} {{ 2 is gt 1 }} {{ 2 is ge 3 }} {{ 1 is lt 2 }} {{ 2 is in [1, 2] }} {{ 'abc' is lower }} {{ 'ABC' is upper }} {{ none is sameas none }} {{ true is true }} {{ 1 is true }} {{ false is false }} {{ x is not defined }} {{ 'upper' is filter }} {{ 'odd' is test }} {{ range is callable }} {{ t is sameas true }} {{ 5 is string }} {{ none is mapping }} {{ nope is iterable }} {{ 2.0 is number }} {{ 'a' is equalto 'a' }} {{ 1 is ne 2 }} {{ 'x' is not none }} {{ 3 is le 3 }} {{ 'ab' is sequence }} {{ 5 is sequence }}"),
    ("test_precedence", "{{ 'a' if none_val is none else 'b' }} {{ not none_val is none }} {{ items|length is odd }} {{ nope is defined and nope.x }} {{ 1 is number and 'y' }}"),
    # globals
    ("strftime_now", "{{ strftime_now('%Y-%m-%d %H:%M:%S') }} {{ strftime_now('%d %b %Y') }} {{ strftime_now('%B %d, %Y %A %j') }}"),
    ("globals", "{{ range(3)|list }} {{ range(1, 10, 3)|list }} {{ range(5, 0, -2)|list }} {{ dict(a=1, b='x') }} {{ dict({'z': 0}, y=1) }} {{ namespace(a=1).a }} {{ range(0)|list }} {{ range(3)|length }}"),
    ("chat_style", "{%- for message in messages %}\n    {%- if message['role'] == 'system' %}\n        {{- '<<' + message['content'] | trim + '>>\\n' }}\n    {%- else %}\n        {{- message.role | upper ~ ': ' ~ message.content ~ '\\n' }}\n    {%- endif %}\n{%- endfor %}\n{%- if add_generation_prompt is defined and add_generation_prompt %}\n    {{- 'ASSISTANT:' }}\n{%- endif %}"),
    # runtime errors (rbee must throw; raise_exception keeps the message)
    ("err_raise_exception", "{{ raise_exception('custom failure: ' ~ 42) }}"),
    ("err_raise_in_loop", "{% for m in messages %}{% if m.role == 'assistant' %}{{ raise_exception('no assistants: ' + m.content) }}{% endif %}{% endfor %}"),
    ("err_undefined_attr", "{{ nope.attr }}"),
    ("err_undefined_add", "{{ nope + 1 }}"),
    ("err_undefined_item", "{{ nope['k'] }}"),
    ("err_undefined_call", "{{ nope() }}"),
    ("err_missing_deeper", "{{ d.missing.deeper }}"),
    ("err_undefined_compare", "{{ nope < 1 }}"),
    ("err_undefined_neg", "{{ -nope }}"),
    ("err_str_plus_int", "{{ 'a' + 1 }}"),
    ("err_int_lt_str", "{{ 1 < 'a' }}"),
    ("err_div_zero", "{{ 1 / 0 }}"),
    ("err_in_non_str", "{{ 5 in 'abc' }}"),
    ("err_iterate_int", "{% for x in 5 %}{% endfor %}"),
    ("err_range_too_big", "{{ range(200000)|length }}"),
    ("err_unpack", "{% for a, b in [[1, 2, 3]] %}{% endfor %}"),
    ("err_ns_assign_non_namespace", "{% set d.x = 1 %}"),
    ("err_unhashable", "{{ {[1]: 2} }}"),
    ("err_items_of_list", "{{ items|items|list }}"),
    ("err_tojson_undefined", "{{ nope|tojson }}"),
    ("err_sort_mixed", "{{ [1, 'a']|sort }}"),
    ("err_macro_too_many_args", "{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}"),
    ("err_slice_step_zero", "{{ items[::0] }}"),
    ("err_join_non_str", "{{ ', '.join([1, 2]) }}"),
    ("err_soft_unknown_filter_evaluated", "{% if true %}{{ 1 | nosuch }}{% endif %}"),
    ("err_markup_plus_int", "{{ '<'|safe + 5 }}"),
    # syntax errors (rbee must throw a syntax error with a position)
    ("syn_if_no_expr", "{% if %}x{% endif %}"),
    ("syn_dangling_op", "{{ 1 + }}"),
    ("syn_for_no_iter", "{% for x in %}{% endfor %}"),
    ("syn_stray_endif", "a{% endif %}"),
    ("syn_unclosed_if", "{% if true %}x"),
    ("syn_unclosed_for", "{% for x in items %}{{ x }}"),
    ("syn_unterminated_string", "{{ 'abc }}"),
    ("syn_unknown_filter", "{{ x | nosuchfilter }}"),
    ("syn_unknown_test", "{{ x is nosuchtest }}"),
    ("syn_unknown_tag", "{% unknowntag %}"),
    ("syn_unbalanced_paren", "{{ (1, 2 }}"),
    ("syn_mismatched_bracket", "{{ [1, 2) }}"),
    ("syn_unclosed_comment", "a {# unclosed comment"),
    ("syn_unclosed_var", "{{ 1 }"),
    ("syn_set_no_target", "{% set %}"),
    ("syn_macro_no_name", "{% macro %}{% endmacro %}"),
    ("syn_break_outside_loop", "{% break %}"),
    ("syn_elif_after_else", "{% if true %}{% else %}{% elif false %}{% endif %}"),
    ("syn_bad_char", "{{ 1 $ 2 }}"),
    ("syn_empty_var", "{{ }}"),
    ("syn_assign_to_literal", "{% set true = 1 %}"),
    ("syn_kwarg_before_pos", "{{ range(stop=1, 2) }}"),
    ("syn_extends", "{% extends 'base.html' %}"),
    ("syn_unknown_filter_in_loop_in_if", "{% if false %}{% for x in [] %}{{ x|nosuch }}{% endfor %}{% endif %}"),
]


def make_features():
    env_render = lambda src: _compile_jinja_template(src).render(**FEATURE_CONTEXT)
    out = []
    for name, src in FEATURES:
        item = {"name": name, "template": src}
        try:
            item["expected"] = env_render(src)
        except jinja2.exceptions.TemplateSyntaxError as e:
            item["error"] = {"type": "TemplateSyntaxError", "message": e.message, "line": e.lineno}
        except jinja2.exceptions.TemplateError as e:
            item["error"] = {"type": type(e).__name__, "message": str(e)}
        except Exception as e:  # TypeError, ZeroDivisionError, ... raised by Python operations in the template
            item["error"] = {"type": type(e).__name__, "message": str(e)}
        expect_error = name.startswith(("err_", "syn_"))
        if expect_error != ("error" in item):
            sys.exit(f"feature {name}: expected {'an error' if expect_error else 'output'}, got {item}")
        out.append(item)
    return {"generator": "tools/goldens/make_chat_template_goldens.py",
            "transformers": transformers.__version__, "jinja2": jinja2.__version__,
            "now": FIXED_NOW.isoformat(), "context": FEATURE_CONTEXT, "features": out}


def extract_smollm2(gguf_path):
    from gguf import GGUFReader
    reader = GGUFReader(gguf_path)
    field = reader.fields["tokenizer.chat_template"]
    template = bytes(field.parts[field.data[0]]).decode("utf-8")
    (DATA / SMOLLM2_FILE).write_bytes(template.encode("utf-8"))
    print(f"wrote {DATA / SMOLLM2_FILE} ({len(template)} chars) from {gguf_path}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smollm2-gguf", help="GGUF file to read SmolLM2's tokenizer.chat_template from")
    args = parser.parse_args()
    if args.smollm2_gguf:
        extract_smollm2(args.smollm2_gguf)
    for name, data in (("goldens.json", make_goldens()), ("features.json", make_features())):
        path = DATA / name
        path.write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        n = len(data.get("cases", data.get("features", [])))
        print(f"wrote {path}: {n} cases, {path.stat().st_size} bytes")


if __name__ == "__main__":
    main()
