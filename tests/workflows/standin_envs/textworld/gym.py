from scripted import ScriptedGame

_GAMES = {}


class _Env:
    def __init__(self, game_file, wrappers):
        self.game, self.wrappers, self.closed = ScriptedGame(game_file), wrappers, False

    def reset(self):
        return self.game.reset(), {}

    def step(self, action):
        observation, reward, done = self.game.step(action)
        return observation, reward, done, {}

    def close(self):
        self.closed = True


def register_game(game_file, request_infos, wrappers=()):
    env_id = f"tw-{len(_GAMES)}"
    _GAMES[env_id] = (game_file, list(wrappers))
    return env_id


def make(env_id):
    return _Env(*_GAMES[env_id])
