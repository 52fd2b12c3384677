// Package notecorpus makes memory notes and user messages that read like
// a bot's real ones, for the benchmarks of memory (cmd/chatgate-bench's
// -memory-only, the store's BenchmarkNotesFor): short third-person facts
// about a user, and questions in everyday words. What a full-text search
// costs depends on the words — common ones ("the", "my", "is") match most
// notes, names and places few — so the benchmarks search realistic text,
// not random tokens or one repeated phrase.
package notecorpus

import (
	"fmt"
	"math/rand/v2"
)

// Notes returns n note texts, the same for the same seed: facts of the
// kinds the memory tools ask the model to keep (name, work, family,
// projects, preferences, plans), 30–90 bytes each.
func Notes(seed uint64, n int) []string {
	r := rand.New(rand.NewPCG(seed, 0x6e6f746573))
	out := make([]string, n)
	for i := range out {
		out[i] = note(r)
	}
	return out
}

// Messages returns count user messages, the same for the same seed:
// questions and requests a bot's users send, many of them about the
// things notes keep.
func Messages(seed uint64, count int) []string {
	r := rand.New(rand.NewPCG(seed, 0x6d7367))
	out := make([]string, count)
	for i := range out {
		out[i] = messages[r.IntN(len(messages))](r)
	}
	return out
}

func pick(r *rand.Rand, words []string) string { return words[r.IntN(len(words))] }

var (
	names     = []string{"Ann", "Ben", "Carla", "Dmitri", "Elif", "Farid", "Greta", "Hiro", "Ines", "Jonas", "Kemal", "Lena", "Mateo", "Nadia", "Oskar", "Priya", "Quentin", "Rosa", "Sven", "Tomasz", "Uma", "Viktor", "Wen", "Yusuf", "Zoe"}
	jobs      = []string{"nurse", "software engineer", "teacher", "accountant", "architect", "chef", "lawyer", "physiotherapist", "data analyst", "carpenter", "pharmacist", "product manager", "translator", "electrician", "journalist"}
	firms     = []string{"small logistics", "large insurance", "family-run bakery", "hospital", "public school", "start-up", "consulting", "solar energy", "bicycle repair", "publishing"}
	cities    = []string{"Lisbon", "Berlin", "Kyoto", "Toronto", "Nairobi", "Melbourne", "Oslo", "Buenos Aires", "Krakow", "Seoul", "Porto", "Vienna", "Chicago", "Istanbul", "Edinburgh", "Hanoi"}
	months    = []string{"January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December"}
	pets      = []string{"cat", "dog", "parrot", "rabbit", "tortoise", "hamster"}
	petNames  = []string{"Zephyr", "Biscuit", "Mochi", "Pepper", "Luna", "Rocket", "Olive", "Noodle", "Maple", "Ziggy"}
	langs     = []string{"Spanish", "Japanese", "German", "Portuguese", "Italian", "Korean", "French", "Polish", "Turkish", "Swahili"}
	codeLangs = []string{"Go", "Python", "TypeScript", "Rust", "Kotlin", "Java", "Elixir", "C#"}
	projects  = []string{"Zephyr", "Atlas", "Harbor", "Quill", "Lantern", "Orchid", "Beacon", "Tundra", "Juniper", "Falcon"}
	kinds     = []string{"weather app", "budgeting tool", "recipe site", "chat bot", "inventory system", "game", "home automation setup", "photo archive"}
	foods     = []string{"mushrooms", "coriander", "spicy food", "olives", "seafood", "peanuts", "dairy", "gluten", "eggplant", "raw onion"}
	likes     = []string{"Thai curries", "dark chocolate", "sourdough bread", "green tea", "pasta", "ramen", "falafel", "cheesecake"}
	hobbies   = []string{"climbing", "chess", "knitting", "photography", "gardening", "sailing", "pottery", "birdwatching", "running", "the piano"}
	days      = []string{"Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"}
	styles    = []string{"short", "detailed", "bullet-point", "step-by-step", "plain-language", "formal"}
	kin       = []string{"daughter", "son", "sister", "brother", "partner", "mother", "father", "grandmother"}
	tools     = []string{"Linux", "a MacBook", "Windows 11", "an old ThinkPad", "a Chromebook", "an iPad"}
	sports    = []string{"football", "basketball", "tennis", "swimming", "volleyball", "judo"}
)

var templates = []func(r *rand.Rand) string{
	func(r *rand.Rand) string {
		return fmt.Sprintf("The user's name is %s; they prefer %s answers.", pick(r, names), pick(r, styles))
	},
	func(r *rand.Rand) string {
		return fmt.Sprintf("Works as a %s at a %s company in %s.", pick(r, jobs), pick(r, firms), pick(r, cities))
	},
	func(r *rand.Rand) string {
		return fmt.Sprintf("Has a %s called %s, %d years old.", pick(r, pets), pick(r, petNames), 1+r.IntN(15))
	},
	func(r *rand.Rand) string {
		return fmt.Sprintf("Is learning %s and practises on %s evenings.", pick(r, langs), pick(r, days))
	},
	func(r *rand.Rand) string {
		return fmt.Sprintf("Does not eat %s; asked never to be given recipes with it.", pick(r, foods))
	},
	func(r *rand.Rand) string {
		return fmt.Sprintf("Their project %s is a %s written in %s, due in %s.", pick(r, projects), pick(r, kinds), pick(r, codeLangs), pick(r, months))
	},
	func(r *rand.Rand) string {
		return fmt.Sprintf("Is planning a trip to %s in %s with their %s.", pick(r, cities), pick(r, months), pick(r, kin))
	},
	func(r *rand.Rand) string {
		return fmt.Sprintf("Their %s %s is %d and plays %s at school.", pick(r, kin), pick(r, names), 6+r.IntN(12), pick(r, sports))
	},
	func(r *rand.Rand) string {
		return fmt.Sprintf("Likes %s and %s; allergic to %s.", pick(r, likes), pick(r, likes), pick(r, foods))
	},
	func(r *rand.Rand) string {
		return fmt.Sprintf("Runs %d km on %s mornings, training for the %s marathon in %s.", 5+r.IntN(20), pick(r, days), pick(r, cities), pick(r, months))
	},
	func(r *rand.Rand) string {
		return fmt.Sprintf("Uses %s at work and %s at home.", pick(r, tools), pick(r, tools))
	},
	func(r *rand.Rand) string {
		return fmt.Sprintf("Spends weekends on %s; wants to try %s this year.", pick(r, hobbies), pick(r, hobbies))
	},
	func(r *rand.Rand) string {
		return fmt.Sprintf("Moved to %s from %s in %d.", pick(r, cities), pick(r, cities), 1995+r.IntN(30))
	},
	func(r *rand.Rand) string {
		return fmt.Sprintf("Wants reminders in %s, never before 9 on %s.", pick(r, langs), pick(r, days))
	},
	func(r *rand.Rand) string {
		return fmt.Sprintf("Their %s's birthday is on %d %s; they usually bake %s.", pick(r, kin), 1+r.IntN(28), pick(r, months), pick(r, likes))
	},
}

func note(r *rand.Rand) string { return templates[r.IntN(len(templates))](r) }

var messages = []func(r *rand.Rand) string{
	func(r *rand.Rand) string {
		return fmt.Sprintf("Can you suggest something to cook tonight? I have %s and rice.", pick(r, likes))
	},
	func(r *rand.Rand) string {
		return fmt.Sprintf("I'm flying to %s next week, any tips for the trip?", pick(r, cities))
	},
	func(r *rand.Rand) string {
		return fmt.Sprintf("What was the name of my %s again?", pick(r, pets))
	},
	func(r *rand.Rand) string {
		return "Help me plan my training for the marathon this month."
	},
	func(r *rand.Rand) string {
		return fmt.Sprintf("How do I fix a nil pointer panic in my %s service?", pick(r, codeLangs))
	},
	func(r *rand.Rand) string {
		return fmt.Sprintf("Write a short birthday message for my %s.", pick(r, kin))
	},
	func(r *rand.Rand) string {
		return fmt.Sprintf("What's the weather usually like in %s in %s?", pick(r, cities), pick(r, months))
	},
	func(r *rand.Rand) string {
		return fmt.Sprintf("Give me five %s phrases for ordering in a restaurant.", pick(r, langs))
	},
	func(r *rand.Rand) string {
		return fmt.Sprintf("Where are we with the %s deadline, and what should I do first?", pick(r, projects))
	},
	func(r *rand.Rand) string {
		return "Can you explain what an index does in a database, in simple words?"
	},
	func(r *rand.Rand) string {
		return fmt.Sprintf("My %s has a %s match on %s, how do I help them get ready?", pick(r, kin), pick(r, sports), pick(r, days))
	},
	func(r *rand.Rand) string {
		return "thanks, that helps"
	},
	func(r *rand.Rand) string {
		return fmt.Sprintf("Is %s a good hobby to start at my age?", pick(r, hobbies))
	},
	func(r *rand.Rand) string {
		return fmt.Sprintf("Summarise this email for me: the meeting with the %s team moved to %s at 3 pm, please bring the report.", pick(r, firms), pick(r, days))
	},
	func(r *rand.Rand) string {
		return "ok and what about tomorrow?"
	},
	func(r *rand.Rand) string {
		return fmt.Sprintf("Which laptop should I buy to replace %s? Budget is around 900 euros.", pick(r, tools))
	},
}
