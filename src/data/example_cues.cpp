#include "data/example_cues.h"

namespace probekit::data {

constexpr std::array<LabelCues, 45> kExampleLabelCues = {{
    {"analyzing", {{"I broke the problem into its parts and examined how each one contributed to the failure.",
                   "Looking at the numbers line by line, I traced the error back to a single faulty assumption.",
                   "I compared the three causes systematically, weighing the evidence for each of them."}}},
    {"reframing", {{"Instead of seeing it as a setback, I started to see it as a chance to learn something new.",
                   "What felt like rejection could also be read as useful feedback about what to change.",
                   "I decided to treat the delay not as a loss of time but as extra time to prepare."}}},
    {"remembering", {{"It reminded me of the summer when my grandfather taught me to fix the old radio.",
                     "I recalled exactly what my teacher had said years ago about patience and practice.",
                     "The smell of the kitchen brought back the evenings we spent cooking together."}}},
    {"questioning", {{"Why did we accept this rule in the first place, and who actually benefits from it?",
                     "I kept asking whether the data really supported the conclusion everyone repeated.",
                     "Is this really the only option, or have we simply stopped looking for others?"}}},
    {"noticing", {{"Only then did I notice the small crack running along the edge of the window.",
                  "I suddenly became aware that she had stopped smiling halfway through the meeting.",
                  "Something caught my attention: the clock on the wall had stopped at ten past four."}}},
    {"hypothesis_generation", {{"Maybe the plants are wilting because the new fertilizer changes the soil acidity.",
                               "One possible explanation is that the users never saw the button at all.",
                               "If my guess is right, the noise should stop when we unplug the second fan."}}},
    {"perspective_taking", {{"From her point of view, my silence probably looked like I did not care at all.",
                            "I tried to imagine how the new employee felt walking into that room alone.",
                            "Seen through the eyes of a child, the rules must seem completely arbitrary."}}},
    {"emotion_management", {{"I took a slow breath and waited until the anger settled before I answered.",
                             "To keep the panic down, I focused on the next small step I could take.",
                             "I let myself feel disappointed for a moment and then calmly put it aside."}}},
    {"reconsidering", {{"After thinking it over again, I am no longer sure my first decision was right.",
                       "I went back to my original plan and started to doubt whether it still made sense.",
                       "Maybe I was too quick to reject the idea; it deserves a second look."}}},
    {"abstracting", {{"Stepping back from the details, the general principle seems to be that trust needs time.",
                     "All these cases share one underlying pattern that goes beyond the particular people.",
                     "The specific story matters less than the broader lesson about how systems fail."}}},
    {"accepting", {{"I have come to terms with the fact that some things are simply outside my control.",
                   "It is what it is, and fighting it any longer would only make things harder.",
                   "I accepted the decision, even though it was not the one I had hoped for."}}},
    {"analogical_thinking", {{"Managing the team is a bit like tending a garden: growth needs the right conditions.",
                             "The problem works like a traffic jam, where one slow car holds up everyone behind it.",
                             "Learning the language felt similar to learning to swim as a child."}}},
    {"applying", {{"I took the technique from the workshop and used it directly on our own project.",
                  "Putting the theory into practice, I rearranged the schedule using the new method.",
                  "I applied the rule of thumb I had read about to decide which task came first."}}},
    {"attentional_deployment", {{"I deliberately turned my attention away from the noise and onto the page.",
                                "Rather than dwelling on the mistake, I focused on what was going well.",
                                "I kept my eyes on the road and ignored the argument in the back seat."}}},
    {"cognition_awareness", {{"I realized that my thinking becomes rigid whenever I am under time pressure.",
                             "I became aware of how I tend to jump to conclusions before hearing everyone.",
                             "It struck me how much my mood was shaping the way I judged the situation."}}},
    {"concretizing", {{"To make it concrete: we need three volunteers, two tables and one hour on Friday.",
                      "In practical terms, that means writing one page every morning before work.",
                      "A specific example would be the invoice that arrived late last Tuesday."}}},
    {"connecting", {{"This finding links directly to what we saw in last year's survey results.",
                    "I saw how her complaint connected to the staffing change made in March.",
                    "Suddenly the two unrelated events fit together into a single story."}}},
    {"convergent_thinking", {{"Out of all the options, only one meets the budget, the deadline and the safety rules.",
                             "We narrowed the list down step by step until a single solution remained.",
                             "Combining the constraints, the answer had to be the smaller apartment."}}},
    {"counterfactual_reasoning", {{"If I had left ten minutes earlier, I would have caught the train.",
                                  "Had we tested the software properly, the outage would never have happened.",
                                  "What if I had said yes to that job offer in another city?"}}},
    {"creating", {{"I sketched a completely new design for the garden, with a pond and a reading corner.",
                  "We invented a small game to teach the children how to count money.",
                  "I wrote a short song about the journey and added a melody on the guitar."}}},
    {"distinguishing", {{"The two proposals look alike, but one saves money while the other saves time.",
                        "It is important to tell apart a real emergency from a merely urgent request.",
                        "Sadness and tiredness feel similar, yet they need very different responses."}}},
    {"divergent_thinking", {{"We brainstormed dozens of wild uses for the old boxes, from shelves to costumes.",
                            "I listed every possible route, even the ones that seemed silly at first.",
                            "There could be many ways to raise the money: a bake sale, a concert, a raffle."}}},
    {"emotion_characterizing", {{"The feeling was not exactly anger, more a heavy mix of hurt and frustration.",
                                "I would describe my mood as restless, a nervous energy with no clear target.",
                                "It was a quiet kind of joy, warm and steady rather than excited."}}},
    {"emotion_facilitation", {{"I used the excitement from the good news to finally start the difficult report.",
                              "Feeling a little anxious actually helped me prepare more carefully.",
                              "My good mood made it easier to come up with creative ideas for the party."}}},
    {"emotion_organizing", {{"My values around honesty now shape how I respond when I feel embarrassed.",
                            "I have built my feelings about work into a clear sense of what matters to me.",
                            "Over time my scattered worries settled into a consistent outlook on life."}}},
    {"emotion_perception", {{"I could see in his tight shoulders and short answers that he was upset.",
                            "Her voice trembled slightly, and I sensed she was more nervous than she claimed.",
                            "The room went quiet, and I read the tension on everyone's faces."}}},
    {"emotion_receiving", {{"I listened openly as she described her grief, without trying to fix anything.",
                           "I let the music wash over me and simply allowed myself to feel it.",
                           "When he shared his fear, I stayed present and took it in without judging."}}},
    {"emotion_responding", {{"Moved by the story, I immediately offered to help with the fundraising.",
                            "I reacted to her happiness with a spontaneous hug and a laugh.",
                            "Hearing the news, I called my brother at once to share the excitement."}}},
    {"emotion_understanding", {{"I understood that his anger came from feeling ignored, not from the broken cup.",
                               "Her jealousy made sense once I knew how hard she had worked for that role.",
                               "I saw how my worry could turn into irritation when I am tired."}}},
    {"emotion_valuing", {{"I have learned to appreciate calm more than excitement in my daily life.",
                         "Compassion is something I truly value and want to show more often.",
                         "I committed myself to treating gratitude as a priority every single day."}}},
    {"emotional_reappraisal", {{"Looking at it differently, my nervousness was really a sign that I cared.",
                               "I reinterpreted the harsh comment as stress talking rather than a personal attack.",
                               "What first felt like humiliation now seems like a funny story to tell."}}},
    {"evaluating", {{"On balance, the cheaper plan is good enough, though its support is weaker.",
                    "I judged the essay to be clear and well argued but too long in the middle.",
                    "Weighing the pros and cons, the move is worth the extra cost."}}},
    {"meta_awareness", {{"I noticed my mind had wandered for several minutes without my realizing it.",
                        "Halfway through the lecture I caught myself daydreaming about the weekend.",
                        "I became aware that I was thinking about thinking instead of solving the task."}}},
    {"metacognitive_monitoring", {{"I checked whether I really understood the chapter before moving on.",
                                  "Midway through, I asked myself if my strategy was still working.",
                                  "I kept track of how confident I felt about each answer on the test."}}},
    {"metacognitive_regulation", {{"Since my approach was not working, I switched to drawing a diagram instead.",
                                  "I slowed down and reread the question once I saw I was rushing.",
                                  "I changed my study plan to review the hardest topics first."}}},
    {"pattern_recognition", {{"Every time the deadline moves, the same two people stop answering emails.",
                             "I recognized the recurring pattern: sales drop each spring after the holidays.",
                             "The errors always appear on the third step, which cannot be a coincidence."}}},
    {"response_modulation", {{"I held back my sharp reply and answered in a neutral tone instead.",
                             "Even though I was furious, I kept my face calm during the meeting.",
                             "I stopped myself from slamming the door and closed it quietly."}}},
    {"self_questioning", {{"Am I doing this because I want to, or because others expect it of me?",
                          "I asked myself honestly whether I had done my part in the conflict.",
                          "What am I really afraid of here, and is that fear justified?"}}},
    {"situation_modification", {{"I asked to move the meeting to the afternoon so I could prepare properly.",
                                "To avoid the argument, I changed the topic and suggested a short walk.",
                                "I rearranged my desk so the distracting window was behind me."}}},
    {"situation_selection", {{"I chose not to go to the party, knowing the crowd would drain me.",
                             "I decided to take the quieter route home to avoid the stressful traffic.",
                             "I picked the smaller team because the atmosphere there suits me better."}}},
    {"suspending_judgment", {{"I decided not to form an opinion until I had heard both sides of the story.",
                             "Rather than deciding right away, I kept an open mind about the new manager.",
                             "I held off on judging the proposal until the full data came in."}}},
    {"understanding", {{"Now I finally understand why the recipe needs the butter to be cold.",
                       "It became clear to me how the different parts of the engine work together.",
                       "After her explanation, the meaning of the poem made complete sense."}}},
    {"updating_beliefs", {{"Given the new evidence, I changed my mind about the safety of the bridge.",
                          "I used to think remote work was lonely, but the past year changed my view.",
                          "The results convinced me to revise my estimate of how long it will take."}}},
    {"zooming_in", {{"I focused closely on the second paragraph, word by word, to find the mistake.",
                    "Looking at the tiny details of the stitching, I found where it had come loose.",
                    "I narrowed my attention to a single line of code and its exact behavior."}}},
    {"zooming_out", {{"Stepping back, this one bad day hardly matters in the bigger picture of the year.",
                     "From a wider view, our small team is just one part of a much larger system.",
                     "Looking at the whole decade, the recent dip is only a short pause."}}},
}};

constexpr std::array<const char*, 10> kExampleSettings = {{
    "At work this morning, the project meeting did not go as planned.",
    "Last weekend my sister and I were cleaning out the garage together.",
    "During the evening class, the teacher handed back our exams.",
    "While cooking dinner, I got a message from an old friend.",
    "On the train home I went through the feedback from my manager.",
    "Our neighborhood association met again to discuss the new parking rules.",
    "Yesterday the doctor called with the results of my tests.",
    "At the start of the trip, the car made a strange sound.",
    "When the budget report came in, the numbers looked wrong.",
    "After the game, the team sat together in the locker room.",
}};
constexpr std::array<const char*, 6> kExampleDomains = {{"work", "family", "education", "friendship", "health", "community"}};
constexpr std::array<const char*, 8> kExampleFillers = {{
    "The weather outside was grey and the streets were quiet.",
    "There was still a lot to do before the end of the week.",
    "Someone had left a cup of cold coffee on the table.",
    "The rest of the afternoon passed without much happening.",
    "It was one of those days that seemed longer than it was.",
    "A few people were still talking in the hallway.",
    "Later that evening I wrote a short note about it in my journal.",
    "The deadline was still two weeks away.",
}};

namespace {

// A list with fewer entries than its array leaves null pointers behind; these checks refuse that at compile time.
template <size_t N>
constexpr bool filled(const std::array<const char*, N>& texts) {
  for (const char* text : texts) {
    if (text == nullptr) return false;
  }
  return true;
}

template <size_t N>
constexpr bool filled(const std::array<LabelCues, N>& bank) {
  for (const LabelCues& entry : bank) {
    if (entry.label == nullptr || !filled(entry.cues)) return false;
  }
  return true;
}

static_assert(filled(kExampleLabelCues), "kExampleLabelCues: an entry is missing");
static_assert(filled(kExampleSettings), "kExampleSettings: an entry is missing");
static_assert(filled(kExampleDomains), "kExampleDomains: an entry is missing");
static_assert(filled(kExampleFillers), "kExampleFillers: an entry is missing");

}  // namespace

}  // namespace probekit::data
