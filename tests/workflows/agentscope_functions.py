"""Agent functions for ``agentscope_workflow_adapter``'s tests, named by dotted path as a user's
config names its own: an AgentScope agent answers the row's question; the judge counts its words."""

from __future__ import annotations

CALLS: list[dict] = []
ANSWERS: list[str] = []


async def answer(task, model):
    """One ReAct agent on the question; reward 1 if it says the answer."""
    from agentscope.agent import Agent, InjectionConfig, ReActConfig
    from agentscope.message import UserMsg

    agent = Agent(
        name="user_agent",
        system_prompt="Answer briefly.",
        model=model,
        react_config=ReActConfig(max_iters=1),
        injection_config=InjectionConfig(inject_runtime_state=False),
    )
    reply = await agent.reply(UserMsg(name="user", content=task["question"]))
    text = reply.get_text_content() or ""
    ANSWERS.append(text)
    return {"reward": float(text.strip() == task["answer"]), "response": text, "metrics": {"answer_chars": len(text)}}


def plain_reward(task, model):
    """A synchronous function returning a bare number (the reward)."""
    return 0.25


async def judge_words(task, response, auxiliary_models, logger):
    CALLS.append({"task": task, "response": response, "auxiliary_models": sorted(auxiliary_models)})
    return {"reward": float(len(response.split())), "metrics": {"judged": 1.0}}


async def no_reward(task, model):
    return {"response": "nothing"}
