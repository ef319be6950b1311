// Built-in chat templates, used when a model ships none or its own fails. Each is plain Jinja run by the same
// interpreter; tools/goldens/make_chat_template_goldens.py reads them from this file (the R"jinja(...)jinja"
// literals keyed by family) and renders them with transformers, so their output is checked like any template.
#include <array>
#include <utility>

#include "rbee/core/error.h"
#include "rbee/llm/chat_template.h"

namespace rbee::llm {

namespace {

// ChatML, as Qwen2/2.5 and SmolLM2 use it (without their default system prompts).
constexpr std::string_view kChatml = R"jinja(
{%- for message in messages %}
    {{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
)jinja";

// Llama 3 header format; message text is trimmed as Meta's templates do.
constexpr std::string_view kLlama3 = R"jinja(
{{- bos_token }}
{%- for message in messages %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
)jinja";

// Llama 2 chat: a leading system message goes into <<SYS>> inside the first user turn; each exchange is
// "<s>[INST] user [/INST] answer </s>". The model continues after "[/INST]", so there is no generation prompt.
constexpr std::string_view kLlama2 = R"jinja(
{%- if messages and messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] | trim %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set system_message = none %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- for message in loop_messages %}
    {%- if message['role'] == 'user' %}
        {%- set content = message['content'] | trim %}
        {%- if loop.first and system_message is not none %}
            {%- set content = '<<SYS>>\n' + system_message + '\n<</SYS>>\n\n' + content %}
        {%- endif %}
        {{- bos_token + '[INST] ' + content + ' [/INST]' }}
    {%- elif message['role'] == 'assistant' %}
        {{- ' ' + message['content'] | trim + ' ' + eos_token }}
    {%- else %}
        {{- raise_exception('Llama 2 chat supports only system, user and assistant messages') }}
    {%- endif %}
{%- endfor %}
)jinja";

// Mistral's [INST] format as Mistral-Nemo writes it: a system message is prepended to the last user turn.
constexpr std::string_view kMistral = R"jinja(
{%- if messages and messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- set ns = namespace(last_user=-1) %}
{%- for message in loop_messages %}
    {%- if message['role'] == 'user' %}
        {%- set ns.last_user = loop.index0 %}
    {%- endif %}
{%- endfor %}
{{- bos_token }}
{%- for message in loop_messages %}
    {%- if message['role'] == 'user' %}
        {%- if loop.index0 == ns.last_user and system_message is defined %}
            {{- '[INST]' + system_message + '\n\n' + message['content'] + '[/INST]' }}
        {%- else %}
            {{- '[INST]' + message['content'] + '[/INST]' }}
        {%- endif %}
    {%- elif message['role'] == 'assistant' %}
        {{- message['content'] + eos_token }}
    {%- else %}
        {{- raise_exception('Mistral chat supports only system, user and assistant messages') }}
    {%- endif %}
{%- endfor %}
)jinja";

// Gemma turns; "assistant" is called "model". Gemma has no system role, so a system message is merged into the
// first user turn (as Gemma 3's template does) instead of being refused.
constexpr std::string_view kGemma = R"jinja(
{{- bos_token }}
{%- if messages and messages[0]['role'] == 'system' %}
    {%- set first_user_prefix = messages[0]['content'] | trim + '\n\n' %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set first_user_prefix = '' %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- for message in loop_messages %}
    {%- set role = 'model' if message['role'] == 'assistant' else message['role'] %}
    {{- '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else '') + message['content'] | trim + '<end_of_turn>\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<start_of_turn>model\n' }}
{%- endif %}
)jinja";

// Phi-3 / Phi-3.5: <|role|> turns closed by <|end|>; empty system messages and other roles are skipped, and
// without a generation prompt the text ends with the EOS token, as Phi-3.5-mini's template does.
constexpr std::string_view kPhi3 = R"jinja(
{%- for message in messages %}
    {%- if message['role'] in ['user', 'assistant'] or (message['role'] == 'system' and message['content']) %}
        {{- '<|' + message['role'] + '|>\n' + message['content'] + '<|end|>\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|assistant|>\n' }}
{%- else %}
    {{- eos_token }}
{%- endif %}
)jinja";

constexpr std::array<std::pair<std::string_view, std::string_view>, 6> kTemplates = {{
    {"chatml", kChatml},
    {"llama3", kLlama3},
    {"llama2", kLlama2},
    {"mistral", kMistral},
    {"gemma", kGemma},
    {"phi3", kPhi3},
}};

}  // namespace

std::string builtin_chat_template(std::string_view family) {
  for (const auto& [name, source] : kTemplates)
    if (name == family) return std::string(source);
  RBEE_THROW(ErrorCode::NotFound, "no built-in chat template for family '{}' (known: chatml, llama3, llama2, mistral, "
             "gemma, phi3)", family);
}

std::vector<std::string> builtin_chat_template_families() {
  std::vector<std::string> out;
  for (const auto& [name, source] : kTemplates) out.emplace_back(name);
  return out;
}

}  // namespace rbee::llm
